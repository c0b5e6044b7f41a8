"""Builds side by side from scripts/gpu/tier-ab's OUT: for each job's run
(native, q75, q50, ...) and build, its timed steps from the FROM_STEP-th on
(default 2: the first timed step pins the host memory the later ones reuse),
those of every repetition (OUT/B-JOB, OUT/B-JOB-r2, ...) together, and
their median, with each build's ratio to the first build's (the one tier-ab
ran first; below 1: faster), and that ratio repetition by repetition (the
builds run in turn in one order, then the other: a change smaller than the
spread between those is not told apart from the machine's drift). One slow step moves the median of all those
steps less than it moves a repetition's own median: a step that pins a
large block's host memory on the job's thread can take half as long again
as the others.

    [FROM_STEP=N] python3 scripts/gpu/ab_table.py OUT"""
import json
import os
import re
import statistics
import sys


FROM_STEP = max(1, int(os.environ.get("FROM_STEP", "2")))


def main():
    out = sys.argv[1]
    # run (job and quota, as tier-check names it) -> build -> [its steps
    # from FROM_STEP on, repetition after repetition]
    steps = {}
    # run -> build -> repetition -> its steps from FROM_STEP on
    by_repetition = {}
    builds = []
    for entry in sorted(os.listdir(out), key=lambda entry: order(out, entry)):
        path = os.path.join(out, entry, "results.jsonl")
        if not os.path.isfile(path):
            continue
        build = re.sub(r"-r\d+$", "", entry).split("-", 1)[0]
        found = re.search(r"-r(\d+)$", entry)
        repetition = int(found.group(1)) if found else 1
        if build not in builds:
            builds.append(build)
        for line in open(path):
            line = json.loads(line)
            result = line.get("result") or {}
            each = (result.get("step_ms_each") or [])[FROM_STEP - 1 :]
            if each and not line["name"].endswith("native"):
                steps.setdefault(line["name"], {}).setdefault(build, []).extend(each)
                by_repetition.setdefault(line["name"], {}).setdefault(build, {})[repetition] = each
    print(f"Timed steps from number {FROM_STEP} on, every repetition's (ms):")
    print()
    print("| run | " + " | ".join(f"{b} (each; median)" for b in builds) + " | "
          + " | ".join(f"{b} / {builds[0]} (by repetition)" for b in builds[1:]) + " |")
    print("| --- |" + " --- |" * (2 * len(builds) - 1))
    for name in sorted(steps):
        by = steps[name]
        medians = {b: statistics.median(by[b]) for b in builds if b in by}
        cells = [f"{' '.join(f'{x:.1f}' for x in by[b])}; {medians[b]:.1f}" if b in by else "-" for b in builds]
        first = medians.get(builds[0])
        ratios = [f"{medians[b] / first:.3f} ({each_ratio(by_repetition[name], b, builds[0])})"
                  if first and b in medians else "-" for b in builds[1:]]
        print(f"| {name} | " + " | ".join(cells + ratios) + " |")


def each_ratio(by_build, build, first):
    """`build`'s median over `first`'s, repetition by repetition where both
    ran it, as "r1, r2, ..." ("-" for a repetition one of them lacks)."""
    ours, theirs = by_build.get(build, {}), by_build.get(first, {})
    return ", ".join(
        f"{statistics.median(ours[r]) / statistics.median(theirs[r]):.3f}" if r in ours and r in theirs else "-"
        for r in sorted(set(ours) | set(theirs)))


def order(out, entry):
    """Repetitions in turn, and within one the builds as tier-ab ran them."""
    found = re.search(r"-r(\d+)$", entry)
    path = os.path.join(out, entry, "results.jsonl")
    made = os.path.getmtime(path) if os.path.exists(path) else 0
    return (int(found.group(1)) if found else 1, made)


if __name__ == "__main__":
    main()
