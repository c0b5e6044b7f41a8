"""The table of scripts/gpu/tier-check: per job and run, the median step,
the ratio to native's and to the floor, whether the losses equal native's,
the most device bytes seen against the quota, and the link's bytes per step.

The floor of a run with S bytes over its quota (native peak less quota) is
max(native step, S / 55 GB/s): each of those bytes must cross the link at
least once a step, at the copy engines' measured 51-55 GB/s, overlapped
with compute at best."""
import json
import os
import statistics
import sys

LINK_BYTES_PER_S = 55e9


def median_step(result):
    return statistics.median(result["step_ms_each"])


def quota_of(env):
    for word in env.split():
        if word.startswith("VRAMSHARE_QUOTA="):
            return int(word.split("=", 1)[1])
    return None


def moves_of(name):
    """The tier's moves in the run's trace: (GB moved per step both ways,
    seconds of moves per step, uses left in place), or None."""
    path = os.path.join(os.path.dirname(sys.argv[1]), f"trace-{name}.json")
    try:
        process = json.load(open(path))["processes"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    moves, steps = process.get("moves"), process.get("access", {}).get("steps", 0)
    if not moves or not steps:
        return None
    moved = (moves["bytes_to_device"] + moves["bytes_to_host"]) / steps / 1e9
    return moved, moves["seconds"] / steps, moves["left_in_place"]


runs = [json.loads(line) for line in open(sys.argv[1])]
native = {r["job"]: r for r in runs if r["name"].endswith("-native") and r["result"]}
print("| run | exit | step ms (median) | x native | x floor | losses = native | most device bytes / quota | link GB/step (rx+tx) | moved GB/step | moves ms/step | left in place |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in runs:
    result = run["result"]
    base = native.get(run["job"])
    if not result or not base:
        print(f"| {run['name']} | {run['exit']} | - | - | - | - | - | - | - | - | - |")
        continue
    step = median_step(result)
    native_step = median_step(base["result"])
    quota = quota_of(run["env"])
    peak = base["result"]["max_allocated"]
    floor = native_step
    if quota:
        floor = max(native_step, 1e3 * max(peak - quota, 0) / LINK_BYTES_PER_S)
    same = result["values"] == base["result"]["values"]
    seen = run.get("sampled_max_device_bytes", 0)
    held = f"{seen / 2**30:.2f} / {quota / 2**30:.2f} GiB" if quota else "-"
    link = "-"
    if "link_rx_bytes_per_step" in result:
        link = f"{(result['link_rx_bytes_per_step'] + result['link_tx_bytes_per_step']) / 1e9:.1f}"
    moved = moves_of(run["name"])
    tier = f"{moved[0]:.1f} | {1e3 * moved[1]:.0f} | {moved[2]}" if moved else "- | - | -"
    print(f"| {run['name']} | {run['exit']} | {step:.1f} | {step / native_step:.2f} | {step / floor:.2f} | {same} | {held} | {link} | {tier} |")
