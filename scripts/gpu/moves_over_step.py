"""When, within one timed step, the spill tier moved bytes, from a run's
trace and the job's JSON line (tier-check's results.jsonl).

    python3 scripts/gpu/moves_over_step.py RESULTS.jsonl RUN [STEP] [BIN_MS]

RUN is a run's name in RESULTS (its trace is trace-RUN.json beside it);
STEP the timed step to look at (default 1, the second); BIN_MS the width of
a bin (default 20). For each bin from the step's start: the allocations
made, the GB that went to the host (moves stamped as they end: the mover
thread's, as their copies have landed and their ranges been remapped) and
onto the device (stamped as queued). A step's start is the first timed
step's start plus the lengths of the timed steps before it: the harness
waits for the device between steps, so the gaps are short."""
import json
import math
import os
import sys


def main():
    results, run = sys.argv[1], sys.argv[2]
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    width = float(sys.argv[4]) if len(sys.argv) > 4 else 20.0
    line = next(line for line in map(json.loads, open(results)) if line["name"] == run)
    result = line["result"]
    each = result["step_ms_each"]
    begin = result["timed_ns"][0] + sum(each[:step]) * 1e6
    length = each[step]
    trace = json.load(open(os.path.join(os.path.dirname(results), f"trace-{run}.json")))
    bins = max(1, math.ceil(length / width))
    allocs, out, into = [0] * bins, [0] * bins, [0] * bins
    for event in trace["events"]:
        at = (event["t_ns"] - begin) / 1e6
        if not 0 <= at < length:
            continue
        b = int(at // width)
        if event["op"] == "alloc":
            allocs[b] += 1
        elif event.get("rc", 0) == 0 and event["op"] == "demote":
            out[b] += event["size"]
        elif event.get("rc", 0) == 0 and event["op"] == "promote":
            into[b] += event["size"]
    print(f"{run}, timed step {step}: {length:.1f} ms; GB to the host {sum(out) / 1e9:.2f}, onto the device {sum(into) / 1e9:.2f}")
    print("ms into the step | allocations | GB to the host | GB onto the device")
    for b in range(bins):
        print(f"{b * width:.0f}-{(b + 1) * width:.0f} | {allocs[b]} | {out[b] / 1e9:.2f} | {into[b] / 1e9:.2f}")


if __name__ == "__main__":
    main()
