"""When, within one timed step, the spill tier moved bytes, from a run's
trace and the job's JSON line (tier-check's results.jsonl).

    python3 scripts/gpu/moves_over_step.py RESULTS.jsonl RUN [STEP] [BIN_MS]

RUN is a run's name in RESULTS (its trace is trace-RUN.json beside it, or
in traces.tar.gz there, as tier-ab leaves it);
STEP the timed step to look at (default 1, the second); BIN_MS the width of
a bin (default 20). For each bin from the step's start: the allocations
made, the GB that went to the host (moves stamped as they end: the mover
thread's, as their copies have landed and their ranges been remapped) and
onto the device (stamped as queued). A step's start is the first timed
step's start plus the lengths of the timed steps before it: the harness
waits for the device between steps, so the gaps are short.

At each bin's end, too: the bytes of the job's live blocks (allocated, not
freed) on the device and in host memory, followed from the run's first
event. What the quota holds beyond the live bytes on the device is free,
or kept by the tier for reuse (freed in stream order). Where the trace
dropped events (its `events_dropped`), these are not exact.

Then, from the tier's samples inside the step (taken about every 50 ms),
for each stretch between two: the GB brought ahead of need, why blocks
did or did not come ahead (the looks at the uses to come made after uses;
of them, those that found no block in host memory that could come; blocks
passed over as queued work still read them in place; looks stopped for
want of room to spare), and the GB of kept blocks on the device at the
stretch's end; and the job's threads' time in the shim's hooks, each
launch's and each other call's (what the shim's own work adds to the
host's pace), then over the last complete step the job marked (or the
whole run) the costliest hooks and the CUDA functions they called, by
name."""
import math
import os
import sys

import run_trace


def main():
    results, run = sys.argv[1], sys.argv[2]
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    width = float(sys.argv[4]) if len(sys.argv) > 4 else 20.0
    _, begin, length = run_trace.timed_step(results, run, step)
    trace = run_trace.load(os.path.dirname(results), run)
    bins = max(1, math.ceil(length / width))
    allocs, out, into = [0] * bins, [0] * bins, [0] * bins
    # Live blocks' bytes by placement at each bin's end (None: no event yet).
    live_at = [None] * bins
    live, held = {}, {"device": 0, "host": 0}
    for event in sorted(trace["events"], key=lambda event: event["seq"]):
        placed = follow(live, held, event)
        at = (event["t_ns"] - begin) / 1e6
        if not 0 <= at < length:
            continue
        b = int(at // width)
        live_at[b] = (held["device"], held["host"])
        if event["op"] == "alloc":
            allocs[b] += 1
        elif placed and event["op"] == "demote":
            out[b] += event["size"]
        elif placed and event["op"] == "promote":
            into[b] += event["size"]
    print(f"{run}, timed step {step}: {length:.1f} ms; GB to the host {sum(out) / 1e9:.2f}, onto the device {sum(into) / 1e9:.2f}")
    print("ms into the step | allocations | GB to the host | GB onto the device | live GB on the device / in host memory")
    last = None
    for b in range(bins):
        last = live_at[b] or last
        held_text = f"{last[0] / 1e9:.2f} / {last[1] / 1e9:.2f}" if last else "-"
        print(f"{b * width:.0f}-{(b + 1) * width:.0f} | {allocs[b]} | {out[b] / 1e9:.2f} | {into[b] / 1e9:.2f} | {held_text}")
    samples = trace["processes"][0]["moves"].get("samples", [])
    inside = [s for s in samples if begin <= s["t_ns"] <= begin + length * 1e6]
    if len(inside) < 2 or "ahead_looks" not in inside[0]:
        # A trace from a build before these counters, or too few samples.
        return
    print()
    print("ms into the step | GB brought ahead | looks ahead | found none in host | passed over, in use | short of room | kept GB on the device")
    for a, b in zip(inside, inside[1:]):
        gone = lambda key: b[key] - a[key]
        print(f"{(a['t_ns'] - begin) / 1e6:.0f}-{(b['t_ns'] - begin) / 1e6:.0f} | {gone('ahead_bytes') / 1e9:.2f} | "
              f"{gone('ahead_looks')} | {gone('ahead_none_in_host')} | {gone('ahead_passed_busy')} | "
              f"{gone('ahead_short_of_room')} | {b['kept_on_device_bytes'] / 1e9:.2f}")
    if "launch_hooks" not in inside[0]:
        return
    print()
    print("The job's threads in the shim's hooks, stretch by stretch: launches, their time in the shim "
          "(each call less the CUDA call it passes on) and of it the shim's own CUDA calls; the ms reading "
          "launches' parameters, moving the blocks that launches, library calls and copies name, and "
          "bringing blocks ahead after them; every other hooked call alike.")
    print()
    print("ms into the step | launches | us each in the shim | of it CUDA (calls each) | ms reading | ms moving named "
          "| ms ahead | other calls | us each in the shim | of it CUDA (calls each)")
    for a, b in zip(inside, inside[1:]):
        gone = lambda key: b.get(key, 0) - a.get(key, 0)
        launches, others = gone("launch_hooks"), gone("other_hooks")
        each = lambda key, calls: f"{gone(key) / calls / 1e3:.1f}" if calls else "-"
        per = lambda key, calls: f"{gone(key) / calls:.1f}" if calls else "-"
        print(f"{(a['t_ns'] - begin) / 1e6:.0f}-{(b['t_ns'] - begin) / 1e6:.0f} | {launches} | "
              f"{each('launch_hooks_ns', launches)} | {each('launch_hooks_cuda_ns', launches)} "
              f"({per('launch_hooks_cuda_calls', launches)}) | {gone('launch_read_ns') / 1e6:.1f} | "
              f"{gone('launch_fetch_ns') / 1e6:.1f} | {gone('launch_ahead_ns') / 1e6:.1f} | {others} | "
              f"{each('other_hooks_ns', others)} | {each('other_hooks_cuda_ns', others)} "
              f"({per('other_hooks_cuda_calls', others)})")
    moves = trace["processes"][0]["moves"]
    host_calls, over = moves.get("host_calls_last_step"), "the last complete step the job marked"
    if not host_calls:
        host_calls, over = moves.get("host_calls", []), "the whole run"
    if host_calls:
        print()
        print(f"Over {over}, the costliest: each hook's own time and the CUDA calls the hooks made of their own, by name")
        print()
        print("kind | name | calls | ms | us each")
        for call in host_calls[:16]:
            print(f"{call['kind']} | {call['name']} | {call['calls']} | {call['seconds'] * 1e3:.1f} | "
                  f"{call['seconds'] * 1e6 / max(call['calls'], 1):.1f}")


def follow(live, held, event):
    """Follows one event in `live` (address to [size, placement]) and
    `held` (bytes by placement); whether it succeeded."""
    if event.get("rc", 0) != 0:
        return False
    ptr, op = event["ptr"], event["op"]
    if op == "alloc" and event["placement"] in held:
        live[ptr] = [event["size"], event["placement"]]
        held[event["placement"]] += event["size"]
    elif op == "free" and ptr in live:
        size, placement = live.pop(ptr)
        held[placement] -= size
    elif op in ("demote", "promote") and ptr in live:
        size, placement = live[ptr]
        held[placement] -= size
        live[ptr][1] = event["placement"]
        held[event["placement"]] += size
    return True


if __name__ == "__main__":
    main()
