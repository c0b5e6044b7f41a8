"""Builds side by side from scripts/gpu/tier-ab's OUT: for each job's run
(native, q75, q50, ...) and build, the median step of each repetition
(OUT/B-JOB, OUT/B-JOB-r2, ...; a run's median over its timed steps, as
tier_summary.py gives it) and their median, with each build's ratio to
the first build's (the one tier-ab ran first; below 1: faster).

    python3 scripts/gpu/ab_table.py OUT"""
import json
import os
import re
import statistics
import sys


def main():
    out = sys.argv[1]
    # run (job and quota, as tier-check names it) -> build -> [median step of
    # each repetition]
    steps = {}
    builds = []
    for entry in sorted(os.listdir(out), key=lambda entry: order(out, entry)):
        path = os.path.join(out, entry, "results.jsonl")
        if not os.path.isfile(path):
            continue
        build = re.sub(r"-r\d+$", "", entry).split("-", 1)[0]
        if build not in builds:
            builds.append(build)
        for line in open(path):
            line = json.loads(line)
            result = line.get("result") or {}
            if result.get("step_ms_each") and not line["name"].endswith("native"):
                median = statistics.median(result["step_ms_each"])
                steps.setdefault(line["name"], {}).setdefault(build, []).append(median)
    print("| run | " + " | ".join(f"{b} (each; median)" for b in builds) + " | " + " | ".join(f"{b} / {builds[0]}" for b in builds[1:]) + " |")
    print("| --- |" + " --- |" * (2 * len(builds) - 1))
    for name in sorted(steps):
        by = steps[name]
        medians = {b: statistics.median(by[b]) for b in builds if b in by}
        cells = [f"{' '.join(f'{x:.1f}' for x in by[b])}; {medians[b]:.1f}" if b in by else "-" for b in builds]
        first = medians.get(builds[0])
        ratios = [f"{medians[b] / first:.3f}" if first and b in medians else "-" for b in builds[1:]]
        print(f"| {name} | " + " | ".join(cells + ratios) + " |")


def order(out, entry):
    """Repetitions in turn, and within one the builds as tier-ab ran them."""
    found = re.search(r"-r(\d+)$", entry)
    path = os.path.join(out, entry, "results.jsonl")
    made = os.path.getmtime(path) if os.path.exists(path) else 0
    return (int(found.group(1)) if found else 1, made)


if __name__ == "__main__":
    main()
