"""Reads scripts/gpu/bench/run's results.jsonl: prints the side-by-side table, each
spilled run's floor, and the correctness checks (exit 1 if one fails).
    python3 table.py RESULTS [--quick]
With --quick (run's "quick" mode: native and the two quotas of the jobs in $JOBS),
the checks of runs that mode does not make are left out, and so are the jobs it was
not asked for; a run it should have made and did not still fails."""
import json
import sys

quick = "--quick" in sys.argv[2:]
runs = {}
for text in open(sys.argv[1]):
    line = json.loads(text)
    runs[line["run"]] = line
GiB = 2**30
failures = []


def check(ok, what):
    print(("  ok      " if ok else "  FAILED  ") + what)
    if not ok:
        failures.append(what)


def result(name):
    return (runs.get(name) or {}).get("result") or {}


def quota_of(name):
    env = (runs.get(name) or {}).get("env", "")
    for word in env.split():
        if word.startswith("VRAMSHARE_QUOTA="):
            return int(word.split("=", 1)[1])
    return None


link = {mode: result(f"link-{mode}").get("GBps") for mode in ["copy", "mapped"]}
writes = result("link-mapped").get("write_GBps")
print(f"host link: pinned copy host->device {link['copy'] or 0:.1f} GB/s, GPU reads of spilled memory {link['mapped'] or 0:.1f} GB/s"
      + (f", GPU writes to it {writes:.1f} GB/s" if writes else ""))
bandwidth = (link["mapped"] or link["copy"] or 50.0) * 1e9
write_bandwidth = (writes or link["mapped"] or 50.0) * 1e9

print()
# Two floors for a spilled run: "est", from the bytes the trace says spilled
# and what each step is expected to touch; "link", from the bytes the GPU
# actually moved over PCIe during the timed steps (NVML, --traffic), each
# direction at its measured rate (the link carries both at once).
print(f"{'run':<24}{'ms/step':>10}{'x native':>10}{'x fastest':>10}{'spilled GiB':>13}{'est ms':>9}{'x est':>7}"
      f"{'link GB rx/tx':>15}{'link ms':>9}{'x link':>8}")
for job in ["dense", "sparse", "inference"]:
    native = result(f"{job}-native")
    base = native.get("step_ms")
    for kind in ["native", "passthrough", "q75", "q50", "managed", "managed-host"]:
        name = f"{job}-{kind}"
        if name not in runs:
            continue
        r = result(name)
        ms = r.get("step_ms")
        trace = runs[name].get("trace") or {}
        spilled = (trace.get("peak_spilled") or {}).get("0", 0)
        floor = None
        if base and spilled and ("crossings_per_step" in r or "table_bytes" in r):
            crossing = spilled * r.get("crossings_per_step", 1)
            table = r.get("table_bytes")
            if table and table in (trace.get("spilled_sizes") or []):
                # The table is what spilled (whole, or its tail): the rows a
                # step touches cross in proportion to the share on the host.
                on_host = min(spilled, table)
                crossing = r["touched_table_bytes_per_step"] * on_host / table + (spilled - on_host)
            floor = base + 1e3 * crossing / bandwidth
        rx, tx = r.get("link_rx_bytes_per_step"), r.get("link_tx_bytes_per_step")
        link_floor = base + 1e3 * max(rx / bandwidth, tx / write_bandwidth) if base and rx is not None and spilled else None
        fastest = r.get("step_ms_min") / native["step_ms_min"] if r.get("step_ms_min") and native.get("step_ms_min") else None
        cells = [
            f"{ms:10.1f}" if ms else f"{'exit ' + str(runs[name]['exit']):>10}",
            f"{ms / base:10.2f}" if ms and base else f"{'':>10}",
            f"{fastest:10.2f}" if fastest else f"{'':>10}",
            f"{spilled / GiB:13.2f}" if spilled else f"{'':>13}",
            f"{floor:9.1f}" if floor else f"{'':>9}",
            f"{ms / floor:7.2f}" if floor and ms else f"{'':>7}",
            f"{rx / 1e9:7.1f}/{tx / 1e9:<7.1f}" if rx is not None else f"{'':>15}",
            f"{link_floor:9.1f}" if link_floor else f"{'':>9}",
            f"{ms / link_floor:8.2f}" if link_floor and ms else f"{'':>8}",
        ]
        print(f"{name:<24}" + "".join(cells))

print()
jobs = ["dense", "sparse", "inference"]
if quick:
    jobs = [job for job in jobs if any(name.startswith(job + "-") for name in runs)]
    print("quick: only native and the 75% and 50% quotas were run, of " + ", ".join(jobs))
for job in jobs:
    print(job)
    native = result(f"{job}-native")
    if not native:
        check(False, f"{job}: native run ({runs.get(job + '-native', {}).get('exit')})")
        continue
    for kind in ["q75", "q50"] if quick else ["passthrough", "q75", "q50"]:
        name = f"{job}-{kind}"
        r = result(name)
        quota = quota_of(name)
        check(r.get("values") == native.get("values"), f"{name}: same losses/outputs as native ({(r.get('values') or [None])[-1]} vs {native['values'][-1]})")
        if kind == "passthrough":
            check(r.get("mem_get_info", [0, 0])[1] == quota, f"{name}: mem_get_info total = quota {quota}")
            if native.get("step_ms") and r.get("step_ms"):
                print(f"          passthrough / native step time: mean {r['step_ms'] / native['step_ms']:.4f}, "
                      f"fastest step {r['step_ms_min'] / native['step_ms_min']:.4f}")
        peak = ((runs.get(name) or {}).get("trace") or {}).get("peak_device", {}).get("0")
        check(peak is not None and quota is not None and peak <= quota, f"{name}: device bytes never above the quota (peak {peak}, quota {quota})")
        if kind != "passthrough":
            ops = ((runs.get(name) or {}).get("trace") or {}).get("ops", {})
            print(f"          trace: {ops}")
    if quick:
        continue
    off = result(f"{job}-off")
    check(off.get("oom") is True, f"{job}-off: torch.cuda.OutOfMemoryError ({off.get('message', off)})")
    managed = runs.get(f"{job}-managed", {})
    print(f"          all-managed anchor: exit {managed.get('exit')}, {result(job + '-managed').get('step_ms')} ms/step")
if quick:
    sys.exit(1 if failures else 0)
check(result("dense-fraction").get("oom") is True, "dense-fraction 0.06: OutOfMemoryError (the anchor)")

pair = runs.get("pair", {})
print("two jobs at once (dense and sparse, 8 GiB each, against peaks of about 15 and 16 GiB)")
for job in ["dense", "sparse"]:
    part = pair.get(job, {})
    check(part.get("exit") == "exit 0", f"pair {job}: completed ({part.get('exit')})")
    if isinstance(part.get("result"), dict):
        # The pair's sparse job runs longer (to overlap the other): compare the steps both made.
        native_values = result(f"{job}-native").get("values") or []
        pair_values = part["result"].get("values") or []
        common_steps = min(len(native_values), len(pair_values))
        check(common_steps > 0 and pair_values[:common_steps] == native_values[:common_steps],
              f"pair {job}: same losses as native over the {common_steps} steps both made")
listed = pair.get("ps", [])
check(len(listed) == 2, f"ps listed both jobs: {[(p['pid'], p['devices'].get('0', {}).get('device_bytes')) for p in listed]}")
sys.exit(1 if failures else 0)
