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
    for event in trace["events"]:
        op, ptr = event["op"], event["ptr"]
        if op == "alloc":
            live[ptr] = event["seq"]
            made[event["seq"]] = event["placement"]
        elif op == "free":
            live.pop(ptr, None)
        elif op in ("promote", "demote") and ptr in live:
            moves[live[ptr]].append(event)
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
        print(f"  bytes onto the device of blocks made {'in host memory' if where == 'host' else 'on the ' + where}: "
              f"{total / steps / 1e9:.2f} GB a step")


if __name__ == "__main__":
    main()
