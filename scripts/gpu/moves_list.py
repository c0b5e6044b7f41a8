"""Every move of one timed step, in order, with the thread that made it, from
a run's trace and the job's JSON line (tier-check's results.jsonl; its trace
is trace-RUN.json beside it, or in traces.tar.gz there, as tier-ab leaves it).

    python3 scripts/gpu/moves_list.py RESULTS.jsonl RUN [STEP]

STEP is the timed step to look at (default 1, the second). Each line: ms
into the step, the move (to the host: stamped as it ends; onto the device:
as it is queued), its MiB, and who made it: the job's main thread, another
of the job's threads (PyTorch's backward runs on one of its own), or the
shim's mover thread (a thread that moves blocks and never allocates).

Then a summary: the GB that went out, when the first and the last went, and
how much of it the job's threads moved themselves (an allocation that found
no room and made it while it waited); the mover's idle time, the time
between its first and last move out beyond what its moves' bytes take at
50 GB/s (the copy engines' 51 to 55 GB/s, less the remaps beside them); the
first move in, and the GB the job's main thread brought in (at the step's
end, an optimizer's reads of blocks that did not come ahead of need)."""
import os
import sys

import run_trace

# The rate moves out would carry with the mover never idle, bytes a ms.
BUSY_BYTES_PER_MS = 50e9 / 1e3


def roles(events):
    """Each thread's role by what it did over the run: the process's own
    thread (tid == pid) is the main thread; a thread that moved blocks and
    never allocated or freed one is the mover; any other is one of the
    job's threads."""
    allocating = {e["tid"] for e in events if e["op"] in ("alloc", "free")}
    found = {}
    for e in events:
        tid = e["tid"]
        if tid == e["pid"]:
            found[tid] = "main"
        elif tid not in allocating and e["op"] in ("demote", "promote"):
            found[tid] = "mover"
        else:
            found[tid] = f"job's thread {tid}"
    return found


def main():
    results, run = sys.argv[1], sys.argv[2]
    step = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    _, begin, length = run_trace.timed_step(results, run, step)
    events = run_trace.load(os.path.dirname(results), run)["events"]
    role = roles(events)
    moves = []
    for e in sorted(events, key=lambda e: e["seq"]):
        at = (e["t_ns"] - begin) / 1e6
        if e["op"] in ("demote", "promote") and 0 <= at < length:
            moves.append((at, e["op"], e["size"], role[e["tid"]]))
    print(f"{run}, timed step {step}: {length:.1f} ms")
    print("ms into the step | move | MiB | by")
    for at, op, size, by in moves:
        where = "to the host" if op == "demote" else "onto the device"
        print(f"{at:.1f} | {where} | {size / 2**20:.0f} | {by}")
    out = [m for m in moves if m[1] == "demote"]
    into = [m for m in moves if m[1] == "promote"]
    if out:
        by_job = sum(m[2] for m in out if m[3] != "mover")
        mover = [m for m in out if m[3] == "mover"]
        idle = sum(
            max(0.0, b[0] - a[0] - b[2] / BUSY_BYTES_PER_MS) for a, b in zip(mover, mover[1:])
        )
        print(
            f"out: {sum(m[2] for m in out) / 1e9:.2f} GB from {out[0][0]:.1f} to {out[-1][0]:.1f} ms; "
            f"{by_job / 2**20:.0f} MiB of it by the job's threads; "
            f"the mover idle {idle:.1f} ms between its moves (beyond their bytes at 50 GB/s)"
        )
    if into:
        by_main = sum(m[2] for m in into if m[3] == "main")
        print(
            f"in: {sum(m[2] for m in into) / 1e9:.2f} GB from {into[0][0]:.1f} ms; "
            f"{by_main / 2**20:.0f} MiB of it by the main thread"
        )


if __name__ == "__main__":
    main()
