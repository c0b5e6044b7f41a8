"""Checks and summarises what scripts/gpu/quick-check left in its folder."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
GiB = 2**30


def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text().strip().splitlines()[-1])
    except (OSError, IndexError, json.JSONDecodeError) as error:
        return {"error": str(error)}


failures = []


def expect(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failures.append(what)


meminfo = load("meminfo")
expect(isinstance(meminfo, list) and meminfo[1] == 4 * GiB and meminfo[0] <= 4 * GiB,
       f"mem_get_info under a 4 GiB quota reports it: {meminfo}")
native, passthrough, spill, spill_off = load("native"), load("passthrough"), load("spill"), load("spill-off")
for name, run in [("passthrough", passthrough), ("spill", spill)]:
    expect(run.get("losses") == native.get("losses"),
           f"{name}: losses identical to native ({run.get('losses', [None])[-1]} vs {native.get('losses', [None])[-1]})")
print(f"step ms: native {native.get('step_ms', 0):.2f}, passthrough {passthrough.get('step_ms', 0):.2f}, "
      f"spill (1 GiB quota) {spill.get('step_ms', 0):.2f}; native max reserved {native.get('max_reserved', 0) / GiB:.2f} GiB")
expect(spill_off.get("oom") is True, f"spill off: torch.cuda.OutOfMemoryError ({spill_off.get('message', spill_off)})")
expect(spill.get("mem_get_info", [0, 0])[1] == GiB, f"spill run saw total = 1 GiB: {spill.get('mem_get_info')}")
try:
    trace = json.loads((out / "trace-spill.json").read_text())
    process = trace["processes"][0]
    ops = {}
    for event in trace["events"]:
        key = (event["op"], event["placement"])
        ops[key] = ops.get(key, 0) + 1
    print("spill trace events:", {f"{op}/{place}": n for (op, place), n in sorted(ops.items(), key=str)})
    print("spill trace process:", json.dumps({k: process[k] for k in ["quota", "peak_device", "peak_spilled", "counts", "runtime", "runtime_version"]}))
    expect(process["peak_device"]["0"] <= GiB, f"device bytes never above the quota: peak {process['peak_device']['0']}")
    expect(process["peak_spilled"]["0"] > 0, f"something spilled: peak {process['peak_spilled']['0']}")
except (OSError, KeyError, json.JSONDecodeError) as error:
    expect(False, f"spill trace readable: {error}")
sys.exit(1 if failures else 0)
