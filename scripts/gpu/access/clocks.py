"""Lines up each timed step of an access-check run with the GPU's clocks
and load over that step, sampled by nvidia-smi (`--query-gpu=timestamp,
clocks.sm,power.draw,utilization.gpu,temperature.gpu --format=csv,noheader,
nounits -lms 100`): whether a slow step is the job's own doing or the
machine's.
    clocks.py RESULTS.jsonl CLOCKS.csv"""
import datetime
import json
import statistics
import sys

samples = []
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    try:
        when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((when, float(parts[1]), float(parts[2]), float(parts[3])))
    except (ValueError, IndexError):
        continue
# nvidia-smi prints local time; steps are in epoch seconds of the same clock.
print("| run | step ms | SM MHz (mean over the step) | power W | GPU util % |")
print("| --- | --- | --- | --- | --- |")
by_clock = []
for line in open(sys.argv[1]):
    run = json.loads(line)
    for began, ms in zip(run.get("step_began", []), run["step_ms_each"]):
        inside = [s for s in samples if began <= s[0] <= began + ms / 1e3]
        if not inside:
            continue
        sm = statistics.mean(s[1] for s in inside)
        power = statistics.mean(s[2] for s in inside)
        util = statistics.mean(s[3] for s in inside)
        by_clock.append((sm, ms))
        print(f"| {run['name']}-{run['how']}-{run['round']} | {ms:.1f} | {sm:.0f} | {power:.0f} | {util:.0f} |")
if by_clock:
    fast = [ms for sm, ms in by_clock if sm >= statistics.median(c for c, _ in by_clock)]
    slow = [ms for sm, ms in by_clock if sm < statistics.median(c for c, _ in by_clock)]
    print(f"\nsteps at or above the median SM clock: median {statistics.median(fast):.1f} ms; "
          f"below it: {statistics.median(slow) if slow else float('nan'):.1f} ms")
