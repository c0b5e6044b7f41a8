"""The table of scripts/gpu/tier-check: per job and run, the median step,
the ratio to native's and to the floor, whether the losses equal native's,
the most device bytes seen against the quota, and the link's bytes per step.

The floor of a run with S bytes over its quota (native peak less quota) is
max(native step, S / 55 GB/s): each of those bytes must cross the link at
least once a step, at the copy engines' measured 51-55 GB/s, overlapped
with compute at best.

The floor for moves bounds what moving blocks can reach, not what any
placement can: max(native step, 2 S / 55 GB/s), for a training step whose
peak comes as its forward ends (the CNN's and the LM's). At that peak S
bytes are off the device; each was last written before it (in the
forward, or at the step before's optimizer step) and is read after it.
Moved, each crosses to the host between the step's start and the peak
and back between the peak and the step's end, so the two directions do
not overlap. Bytes read and written in place over the link (an optimizer
step over state that stays in host memory) could cross both ways at
once, which is why the floor above counts S once. Not given for the
other jobs: the dense job may peak inside its optimizer step; the
inference and sparse jobs read what is over the quota once a step."""
import functools
import json
import os
import statistics
import sys
import tarfile

import run_trace

LINK_BYTES_PER_S = 55e9
# The training jobs whose peak comes as the forward ends (above).
MOVED_FLOOR_JOBS = {"cnn", "cnn-marked", "lm", "lm-marked"}
# FROM_STEP=N: the second table counts the timed steps from the Nth on
# (the first ones may still pin host memory the later ones reuse).
FROM_STEP = max(1, int(os.environ.get("FROM_STEP", "1")))


def median_step(result):
    return statistics.median(result["step_ms_each"])


def quota_of(env):
    for word in env.split():
        if word.startswith("VRAMSHARE_QUOTA="):
            return int(word.split("=", 1)[1])
    return None


@functools.lru_cache(maxsize=None)
def trace_process(name):
    """The first process of the run's trace (read once: the summary asks it
    several things), or None."""
    try:
        return run_trace.load(os.path.dirname(sys.argv[1]), name)["processes"][0]
    except (OSError, ValueError, KeyError, IndexError, tarfile.TarError):
        return None


def moves_of(name, steps):
    """The tier's moves in the run's trace, per step of the `steps` the run
    made (warm-up included): (GB moved both ways, seconds of copies and
    remaps, seconds waiting for the device, and of the first: seconds
    waiting for copies, remapping, making memory, pinning new host memory
    (wherever it was made); rounds of moves; and over the whole run: GB
    of host memory pinned, the most bytes in host memory at once (the
    process's peak spilled: the tier's blocks there and any other spill),
    and given back while blocks remained; then the times the device was
    drained a step (None for a build before they were counted), and of
    them those beside the kernels after a launch the shim could not read,
    and for want of room among blocks whose uses are known), or None."""
    process = trace_process(name) or {}
    moves = process.get("moves")
    if not moves or not steps:
        return None
    moved = (moves["bytes_to_device"] + moves["bytes_to_host"]) / steps / 1e9
    parts = [moves.get(k, 0) / steps for k in ("copy_seconds", "remap_seconds", "memory_seconds", "pinning_seconds", "fetches")]
    spilled = max((process.get("peak_spilled") or {}).values(), default=0)
    host = (moves.get("pinned_bytes", 0) / 1e9, spilled / 1e9, moves.get("unpinned_bytes", 0) / 1e9)
    # A trace from a build before `drains` was counted has none: None.
    drains = (moves["drains"] / steps if "drains" in moves else None,
              moves.get("drains_unread", 0) / steps, moves.get("drains_for_room", 0) / steps)
    return (moved, moves["seconds"] / steps, moves.get("drain_seconds", 0) / steps, *parts, *host, *drains)


def timed_moves(name, result):
    """The tier's costs per step over the timed steps only (warm-up left
    out), from the trace's samples of its counters that fall inside the
    timed window: (GB moved both ways, ms of copies, remaps, of which to
    the host, making memory, other work of the moves, waiting for the
    device; the rounds of moves and of them the drains (None for a build
    before they were counted); then the parts, the last the copier's time
    as `copier` below), or None."""
    window = result.get("timed_ns")
    try:
        samples = trace_process(name)["moves"]["samples"]
    except (KeyError, TypeError):
        return None
    if not window or not samples:
        return None
    each = result["step_ms_each"]
    skipped = each[: FROM_STEP - 1]
    if len(skipped) >= len(each):
        return None
    window = (window[0] + int(sum(skipped) * 1e6), window[1])
    inside = [s for s in samples if window[0] <= s["t_ns"] <= window[1]]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    step_ns = (window[1] - window[0]) / (len(each) - len(skipped))
    steps = (last["t_ns"] - first["t_ns"]) / step_ns
    if steps <= 0:
        return None
    # A build before a counter was added has none: 0.
    keys = ("move_ns", "copy_ns", "remap_ns", "remap_to_host_ns", "memory_ns", "drain_ns",
            "fetches", "drains", "bytes_to_device", "bytes_to_host", "device_create_ns",
            "device_release_ns", "pinning_ns", "queue_ns", "choose_ns", "give_back_ns", "hand_out_ns",
            "place_ns", "placed", "mover_ns", "mover_copy_ns", "mover_remap_ns", "mover_memory_ns", "mover_claim_wait_ns",
            "mover_room_wait_ns", "free_wait_ns", "ahead_bytes",
            "made_with_room_bytes", "out_before_peak_bytes", "out_kept_free_bytes", "out_for_room_bytes",
            "copier_busy_ns", "copier_queue_ns")
    per = {k: (last.get(k, 0) - first.get(k, 0)) / steps for k in keys}
    other = per["move_ns"] - per["copy_ns"] - per["remap_ns"] - per["memory_ns"]
    moved = (per["bytes_to_device"] + per["bytes_to_host"]) / 1e9
    ms = [per[k] / 1e6 for k in ("copy_ns", "remap_ns", "remap_to_host_ns", "memory_ns")]
    parts = [per[k] / 1e6 for k in ("device_create_ns", "device_release_ns", "pinning_ns", "queue_ns", "choose_ns", "give_back_ns", "hand_out_ns", "place_ns")]
    parts.append(per["placed"])
    parts += [per[k] / 1e6 for k in ("mover_ns", "mover_copy_ns", "mover_remap_ns", "mover_memory_ns", "mover_claim_wait_ns",
                                     "mover_room_wait_ns", "free_wait_ns")]
    parts.append(per["ahead_bytes"] / 1e9)
    parts.append(per["made_with_room_bytes"] / 1e9)
    # Why blocks were chosen to go out: before the peak, for the room kept
    # free, for room needed at once (None: a build before the last two).
    chosen = (per["out_before_peak_bytes"] / 1e9, per["out_kept_free_bytes"] / 1e9, per["out_for_room_bytes"] / 1e9)
    parts.append(chosen if "out_for_room_bytes" in last else (chosen[0], None, None))
    # The copier's time with a copy out under way (ms), of it in the calls
    # that queue each piece, and the bytes to the host over that time (bytes
    # a ns: GB/s; every move out goes through the copier where it runs, and
    # none where it is 0); None for a build before the copier was timed.
    busy = per["copier_busy_ns"]
    rate = per["bytes_to_host"] / busy if busy else None
    copier = (busy / 1e6, per["copier_queue_ns"] / 1e6, rate) if "copier_busy_ns" in last else None
    parts.append(copier)
    return (moved, *ms, other / 1e6, per["drain_ns"] / 1e6, (per["fetches"], per["drains"] if "drains" in last else None), *parts)


def index_rebuild_ms(name, steps):
    """The time the launches' index took to rebuild, per step of the whole
    run (warm-up included), or "-"."""
    try:
        access = trace_process(name)["access"]
        return f"{1e3 * access['index_rebuild_seconds'] / steps:.0f} ({access['index_rebuilds'] // steps} a step)"
    except (KeyError, TypeError, ZeroDivisionError):
        return "-"


runs = [json.loads(line) for line in open(sys.argv[1])]
# A build after the first in scripts/gpu/tier-ab has no native run of its
# own: NATIVE_FROM names the results that hold it (the first build's).
natives = list(runs)
if os.environ.get("NATIVE_FROM"):
    natives += [json.loads(line) for line in open(os.environ["NATIVE_FROM"])]
native = {r["job"]: r for r in natives if r["name"].endswith("-native") and r["result"]}
print("| run | exit | step ms (median) | x native | x floor | x floor for moves | losses = native | most device bytes / quota | link GB/step (rx+tx) | moved GB/step | copy+remap ms/step | drain ms/step | of copy+remap: copies / remaps / memory ms | pinning ms/step | rounds of moves / drains a step | host GB pinned / most in host memory at once / given back (run) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in runs:
    result = run["result"]
    base = native.get(run["job"])
    if not result or not base:
        print(f"| {run['name']} | {run['exit']} | - | - | - | - | - | - | - | - | - | - | - | - | - | - |")
        continue
    step = median_step(result)
    native_step = median_step(base["result"])
    quota = quota_of(run["env"])
    peak = base["result"]["max_allocated"]
    floor = moved_floor = native_step
    if quota:
        over = max(peak - quota, 0)
        floor = max(native_step, 1e3 * over / LINK_BYTES_PER_S)
        moved_floor = max(native_step, 2e3 * over / LINK_BYTES_PER_S)
    moved_floor_cell = f"{step / moved_floor:.2f}" if run["job"] in MOVED_FLOOR_JOBS else "-"
    same = result["values"] == base["result"]["values"]
    seen = run.get("sampled_max_device_bytes", 0)
    held = f"{seen / 2**30:.2f} / {quota / 2**30:.2f} GiB" if quota else "-"
    if not quota and result.get("max_allocated") and run is not base:
        # An anchor: no quota, what PyTorch held at most on the device.
        held = f"{result['max_allocated'] / 2**30:.2f} GiB (PyTorch's peak)"
    link = "-"
    if "link_rx_bytes_per_step" in result:
        link = f"{(result['link_rx_bytes_per_step'] + result['link_tx_bytes_per_step']) / 1e9:.1f}"
    moved = moves_of(run["name"], len(result["values"]))
    tier = (
        f"{moved[0]:.1f} | {1e3 * moved[1]:.0f} | {1e3 * moved[2]:.0f} | "
        f"{1e3 * moved[3]:.0f} / {1e3 * moved[4]:.0f} / {1e3 * moved[5]:.0f} | {1e3 * moved[6]:.0f} | "
        f"{moved[7]:.0f} / {'-' if moved[11] is None else f'{moved[11]:.1f}'} ({moved[12]:.1f} unread, {moved[13]:.1f} for room) | "
        f"{moved[8]:.1f} / {moved[9]:.1f} / {moved[10]:.1f}"
        if moved
        else "- | - | - | - | - | - | -"
    )
    print(f"| {run['name']} | {run['exit']} | {step:.1f} | {step / native_step:.2f} | {step / floor:.2f} | {moved_floor_cell} | {same} | {held} | {link} | {tier} |")

print()
print("Timed steps only (the trace's samples inside them):" if FROM_STEP == 1 else
      f"Timed steps from timed step {FROM_STEP} on (the trace's samples inside them):")
print()
print("| run | step ms (median) | moved GB/step | copies ms | remaps ms | of which to host ms | memory ms | other moves' work ms | drain ms | rounds of moves / drains a step | of memory: device made / released ms | pinning ms | of other work: queuing ms | choosing blocks ms (also before moves) | kept blocks given back ms (also at allocations) | kept blocks' ranges filled at hand-out ms | new blocks made at allocations ms (blocks) | mover thread's moves ms (beside the job) | of the mover's: copies / remaps / memory ms | job's waits for moves it claimed ms | job's waits for room: the mover's moves / kept blocks' frees ms | brought ahead GB/step | made on the device by moving others out / chosen to go out: before the peak, for the room kept free, for room needed at once GB/step | copier: copies out under way / of it queuing ms (GB/s out while under way) | index rebuilds ms/step (whole run) |")
print("| --- " * 25 + "|")
for run in runs:
    result = run["result"]
    if not result:
        continue
    timed = timed_moves(run["name"], result)
    rebuilds = index_rebuild_ms(run["name"], len(result["values"]))
    if not timed and rebuilds == "-":
        continue
    if timed:
        head = " | ".join(f"{x:.1f}" if i == 0 else f"{x:.0f}" for i, x in enumerate(timed[:7]))
        rounds, drains = timed[7]
        head += f" | {rounds:.0f} / {'-' if drains is None else f'{drains:.1f}'}"
        made, released, pinning, queuing, choosing, given, filled, placed_ms, placed, mover, m_copy, m_remap, m_memory, claim_wait, room_wait, free_wait, ahead, born, early, copier = timed[8:]
        chosen_cell = ", ".join("-" if x is None else f"{x:.1f}" for x in early)
        copier_cell = "-" if copier is None else (f"{copier[0]:.0f} / {copier[1]:.0f} ({copier[2]:.0f})" if copier[2] else "0")
        cells = (f"{head} | {made:.0f} / {released:.0f} | {pinning:.0f} | {queuing:.0f} | {choosing:.0f} | {given:.0f} | {filled:.0f} | {placed_ms:.0f} ({placed:.0f}) | {mover:.0f} | "
                 f"{m_copy:.0f} / {m_remap:.0f} / {m_memory:.0f} | {claim_wait:.0f} | {room_wait:.0f} / {free_wait:.0f} | {ahead:.1f} | {born:.1f} / {chosen_cell} | {copier_cell}")
    else:
        cells = " | ".join(["-"] * 22)
    print(f"| {run['name']} | {median_step(result):.1f} | {cells} | {rebuilds} |")

timelines = [(r["name"], r["result"]["timeline"]) for r in runs if r["result"] and "timeline" in r["result"]]
if timelines:
    print()
    print("One step more under PyTorch's profiler (ms; streams as busy ms of kernels + copies, the busiest first):")
    print()
    print("| run | step on the host | device span | kernels | copies | kernels and copies at once | device idle | kernels | streams |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, t in timelines:
        if "error" in t:
            print(f"| {name} | {t['error']} | | | | | | | |")
            continue
        streams = sorted(t["streams"].items(), key=lambda kv: -(kv[1]["kernels_ms"] + kv[1]["copies_ms"]))
        listed = "; ".join(f"{key}: {v['kernels_ms']:.0f} + {v['copies_ms']:.0f}" for key, v in streams[:5])
        print(f"| {name} | {t['span_ms']:.0f} | {t['device_span_ms']:.0f} | {t['kernels_ms']:.0f} | {t['copies_ms']:.0f} | "
              f"{t['both_ms']:.0f} | {t['idle_ms']:.0f} | {t['kernel_count']} | {listed} |")
    for name, t in timelines:
        if not t.get("phases"):
            continue
        keys = sorted({key for p in t["phases"] for key in p["copy_streams_ms"]})
        print()
        width = t["phases"][1]["from_ms"] if len(t["phases"]) > 1 else "-"
        print(f"{name}, the profiled step in phases of {width} ms (ms busy; copy streams by id; the host's "
              "launches begun, and its ms in CUDA's allocation, free and launch calls):")
        print()
        print("| from ms | kernels | " + " | ".join(f"copies {k}" for k in keys) + " | launches | alloc | free | launch |")
        print("| --- " * (6 + len(keys)) + "|")
        for p in t["phases"]:
            copies = " | ".join(f"{p['copy_streams_ms'].get(k, 0):.1f}" for k in keys)
            print(f"| {p['from_ms']:.0f} | {p['kernels_ms']:.1f} | {copies} | {p['launches']} | "
                  f"{p['alloc_ms']:.1f} | {p['free_ms']:.1f} | {p['launch_ms']:.1f} |")
    with_calls = [(name, t["host_calls"]) for name, t in timelines if t.get("host_calls")]
    if with_calls:
        print()
        print("The host's costliest CUDA calls in that step (ms, calls):")
        print()
    for name, calls in with_calls:
        if calls:
            listed = "; ".join(f"{call} {v[0]} ({v[1]})" if isinstance(v, list) else f"{call}: {v}" for call, v in calls.items())
            print(f"- {name}: {listed}")
