"""What the spill tier moved, block by block, from a trace's events.

    python3 scripts/gpu/moves_by_block.py TRACE.json [STEPS]

Each allocation is one block (a start the allocator hands out again is a
new block). For the blocks that moved: how many times each came onto the
device in its life, and the bytes that came onto the device, split by
where the block was made (on the device, so it went out first and came
back; or in host memory, over the quota, so its first use brought it in).
STEPS divides the bytes into bytes a step (the run's steps, warm-up
included; default 1). The trace must have dropped no events."""
import collections
import json
import sys


def main():
    trace = json.load(open(sys.argv[1]))
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    dropped = sum(p.get("events_dropped", 0) for p in trace["processes"])
    if dropped:
        sys.exit(f"{sys.argv[1]}: {dropped} events were dropped; the counts would be short")
    live, made, moves = {}, {}, collections.defaultdict(list)
    # In time order, a block known by its process and start; a move whose
    # copy failed moved nothing (as `vramshare replay` counts them).
    for event in sorted(trace["events"], key=lambda e: (e["t_ns"], e["seq"])):
        op, key = event["op"], (event["pid"], event["ptr"])
        if op == "alloc" and event.get("rc", 0) == 0:
            live[key] = (event["pid"], event["seq"])
            made[live[key]] = event.get("placement") or "unknown"
        elif op == "free":
            live.pop(key, None)
        elif op in ("promote", "demote") and key in live:
            if event.get("rc", 0) == 0 or event.get("api") != "cuMemcpyAsync":
                moves[live[key]].append(event)
    times_in = collections.Counter()
    bytes_in = collections.Counter()
    for block, events in moves.items():
        coming = [e for e in events if e["op"] == "promote"]
        times_in[len(coming)] += 1
        bytes_in[made[block]] += sum(e["size"] for e in coming)
    print(f"blocks that moved: {len(moves)}")
    for times, blocks in sorted(times_in.items()):
        print(f"  came onto the device {times} times: {blocks} blocks")
    for where, total in sorted(bytes_in.items()):
        place = "in host memory" if where == "host" else f"on the {where}"
        print(f"  bytes onto the device of blocks made {place}: {total / steps / 1e9:.2f} GB a step")


if __name__ == "__main__":
    main()
