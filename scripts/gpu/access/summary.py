"""Summarizes an access-check run: per job, native and shim step times (the
median of the rounds) and their ratio, launches per step, the share of
launches decoded (their parameters read, or made inside a library call whose
operands were read) and named a block, by path, and the last complete
step's bytes named by launches out of the bytes live through it.
    summary.py OUT_DIR"""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
runs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
jobs = []
for run in runs:
    if run["name"] not in jobs:
        jobs.append(run["name"])


def median(job, how):
    """The median of every timed step of every round (a single slow step,
    a collection or a page fault, moves a mean but not this)."""
    times = [t for r in runs if r["name"] == job and r["how"] == how
             for t in r.get("step_ms_each", [r["step_ms"]])]
    return statistics.median(times) if times else None


print("| job | native ms (median step) | shim ms | shim / native | launches / step | decoded | named a block | undecoded | step bytes named / live |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
paths = []
for job in jobs:
    native, shim = median(job, "native"), median(job, "shim")
    trace_file = out / f"trace-{job}-1.json"
    if not trace_file.exists():
        print(f"| {job} | {native} | {shim} | - | no trace | | | | |")
        continue
    process = json.loads(trace_file.read_text())["processes"][0]
    coverage = process.get("coverage", {})
    kernels = {api: c for api, c in coverage.items() if api in process.get("launches", {})}
    total = sum(sum(c.values()) for c in kernels.values())
    named = sum(c.get("named", 0) for c in kernels.values())
    inside = sum(c.get("in_library", 0) for c in kernels.values())
    unnamed = sum(c.get("unnamed", 0) for c in kernels.values())
    undecoded = sum(c.get("undecoded", 0) for c in kernels.values())
    access = process.get("access") or {}
    steps = [r for r in runs if r["name"] == job and r["how"] == "shim"][0]
    timed_steps = len(steps["values"])  # every step run, the warm-up ones too
    step = access.get("last_step") or {}
    share = lambda part: f"{100 * part / total:.1f}%" if total else "-"
    byte_share = (f"{100 * step['touched_bytes'] / step['live_bytes']:.1f}% of {step['live_bytes'] / 2**30:.2f} GiB"
                  if step.get("live_bytes") else "-")
    ratio = f"{shim / native:.3f}" if native and shim else "-"
    print(f"| {job} | {native:.2f} | {shim:.2f} | {ratio} | {total / timed_steps:.0f} | "
          f"{share(named + inside + unnamed)} | {share(named + inside)} | {share(undecoded)} | {byte_share} |")
    for api, c in sorted(kernels.items()):
        paths.append((job, api, c))
    libraries = process.get("library_calls", {})
    paths.append((job, "library calls", {api: n for api, n in libraries.items()}))
    paths.append((job, "steps", {"found": access.get("steps"), "marked": access.get("marked"),
                                 "step_launches": access.get("step_launches"),
                                 "functions": access.get("functions"),
                                 "described": access.get("functions_described"),
                                 "last_step": step}))
print()
print("By path (launches in the whole run):")
for job, api, counts in paths:
    print(f"- {job} {api}: {json.dumps(counts)}")
