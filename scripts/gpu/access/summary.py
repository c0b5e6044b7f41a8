"""Summarizes an access-check run: per job, native and shim step times (the
median of the rounds) and their ratio, launches per step, the share of
launches decoded (their parameters read, or made inside a library call whose
operands were read) and named a block, by path, and the last complete
step's bytes named by launches out of the bytes live through it, and out
of the bytes PyTorch says that step used (its caching allocator's segments
holding a live tensor at some time in the step, measured in one more step
after the timed ones, which the shim's marks, where the job makes them,
make the shim's latest complete step).
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


def used_named(job, access):
    """The share of the bytes PyTorch says the step used that the shim
    named in its latest complete step; and the segments used but not named,
    and named but not used (by PyTorch's account), largest first."""
    touched_file = out / f"touched-{job}-1.json"
    if not touched_file.exists():
        return "-", None
    segments = json.loads(touched_file.read_text())["segments"]
    named = {int(b["ptr"], 16) for b in access.get("blocks", []) if b.get("last_step")}
    used = [s for s in segments if s["touched"]]
    used_bytes = sum(s["size"] for s in used)
    named_bytes = sum(s["size"] for s in used if s["address"] in named)
    not_named = sorted((s["size"] for s in used if s["address"] not in named), reverse=True)
    not_used = sorted((s["size"] for s in segments if not s["touched"] and s["address"] in named), reverse=True)
    missed = {"used_not_named": not_named[:10], "named_not_used": not_used[:10]}
    share = f"{100 * named_bytes / used_bytes:.1f}% of {used_bytes / 2**30:.2f} GiB" if used_bytes else "-"
    return share, missed


print("| job | native ms (median step) | shim ms | shim / native | launches / step | decoded | named a block | undecoded | step bytes named / live | used bytes (PyTorch) named |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
paths = []
for job in jobs:
    native, shim = median(job, "native"), median(job, "shim")
    trace_file = out / f"trace-{job}-1.json"
    if not trace_file.exists():
        print(f"| {job} | {native} | {shim} | - | no trace | | | | | |")
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
    if (out / f"touched-{job}-1.json").exists():
        timed_steps += 1  # and the one measured after them
    step = access.get("last_step") or {}
    share = lambda part: f"{100 * part / total:.1f}%" if total else "-"
    byte_share = (f"{100 * step['touched_bytes'] / step['live_bytes']:.1f}% of {step['live_bytes'] / 2**30:.2f} GiB"
                  if step.get("live_bytes") else "-")
    ratio = f"{shim / native:.3f}" if native and shim else "-"
    used_share, missed = used_named(job, access)
    print(f"| {job} | {native:.2f} | {shim:.2f} | {ratio} | {total / timed_steps:.0f} | "
          f"{share(named + inside + unnamed)} | {share(named + inside)} | {share(undecoded)} | {byte_share} | "
          f"{used_share} |")
    if missed:
        paths.append((job, "used, not named", missed))
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
