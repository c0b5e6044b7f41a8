"""What the shim costs a job that fits, from scripts/gpu/passthrough-ab's
results.jsonl: for each job and round, the median of native's timed steps
and of the shim's (from the FROM_STEP-th on, default 2), and their ratio;
then over every round together: the medians of all those steps, their
ratio, and the fastest step of each; last, the spread of native's own round
medians, against which a ratio within 1% can be told from noise.

    [FROM_STEP=N] python3 scripts/gpu/passthrough_table.py RESULTS.jsonl"""
import json
import os
import statistics
import sys

FROM_STEP = max(1, int(os.environ.get("FROM_STEP", "2")))


def steps_of(line):
    result = line.get("result") or {}
    return (result.get("step_ms_each") or [])[FROM_STEP - 1 :]


def main():
    lines = [json.loads(text) for text in open(sys.argv[1]) if text.strip()]
    jobs = []
    for line in lines:
        if line["job"] not in jobs:
            jobs.append(line["job"])
    print(f"Timed steps from number {FROM_STEP} on (ms); round 0 is the run that found the peak.")
    for job in jobs:
        # round -> {"native": steps, "shim": steps}
        rounds = {}
        for line in lines:
            if line["job"] == job and line["round"] > 0 and steps_of(line):
                kind = "shim" if line["name"].endswith("-shim") else "native"
                rounds.setdefault(line["round"], {})[kind] = steps_of(line)
        print()
        if not rounds:
            print(f"{job}: no round ran to its end")
            continue
        print(f"{job}:")
        print()
        print("| round | native (median) | shim (median) | shim / native |")
        print("| --- | --- | --- | --- |")
        every = {"native": [], "shim": []}
        native_medians = []
        for number in sorted(rounds):
            both = rounds[number]
            cells = []
            for kind in ("native", "shim"):
                steps = both.get(kind)
                every[kind].extend(steps or [])
                cells.append(f"{statistics.median(steps):.2f}" if steps else "-")
            if "native" in both:
                native_medians.append(statistics.median(both["native"]))
            ratio = (f"{statistics.median(both['shim']) / statistics.median(both['native']):.3f}"
                     if "native" in both and "shim" in both else "-")
            print(f"| {number} | {cells[0]} | {cells[1]} | {ratio} |")
        if every["native"] and every["shim"]:
            n, s = statistics.median(every["native"]), statistics.median(every["shim"])
            fn, fs = min(every["native"]), min(every["shim"])
            print(f"| all | {n:.2f} | {s:.2f} | {s / n:.3f} |")
            print(f"| fastest step | {fn:.2f} | {fs:.2f} | {fs / fn:.3f} |")
        if len(native_medians) > 1:
            low, high = min(native_medians), max(native_medians)
            print()
            print(f"native's round medians spread {low:.2f} to {high:.2f} ms ({(high / low - 1) * 100:.1f}%)")


if __name__ == "__main__":
    main()
