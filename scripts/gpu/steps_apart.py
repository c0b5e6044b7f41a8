"""Each timed step of a run on its own, to tell a slow step from the others
and say what it did differently, from the run's trace and the job's JSON
line (tier-check's results.jsonl; its trace is trace-RUN.json beside it,
or in traces.tar.gz there, as tier-ab leaves it).

    python3 scripts/gpu/steps_apart.py RESULTS.jsonl RUN

One line a step: its length; the GB that went to the host and onto the
device (the trace's moves, stamped as they end and as they are queued);
then, from the trace's samples of the tier's counters (every 50 ms, so a
step's share is that of the samples inside it, about), the ms the job's
threads spent making memory (pinning host memory for a block's first move
out is most of it), remapping, and waiting for the room the mover thread's
moves free, and the ms the mover thread spent remapping; the ms the job's
threads spent ordering work after blocks' uses and recording their events,
and of it waiting on the host where a call's stream was not known; the ms
both threads spent pinning host memory (a block's first move out makes it): a
step that pins is slow for that, and the steps after it stop pinning once
each block of the step has host memory of its own; of the host memory pinned,
the MiB made while as much lay unused that could not serve the block (of
another size, or a kept block's whose free was not reached); last, the ms the job's
threads spent giving kept blocks' device memory back (of it, for the room
kept free ahead of need) and mapping memory at kept blocks' empty ranges
as they are handed out again; then why blocks did or did not come ahead of
need: the looks at the uses to come, those that found no block in host
memory that could come, blocks passed over as queued work still read them
in place, and looks stopped for want of room to spare; and the uses the
step before foretold (named first what it had named first there) and those
it did not; last, the uses that read their block in host memory since it had
come in once in the step already, and the mover thread's moves out made and
claimed back before they began (work named their block); and why blocks
were chosen to go out, in GB: handed to the mover thread before the step's
peak, for the room kept free for moves, for room a block a use named or a
new block needed at once (what was claimed back never went, so these may
pass the GB to the host), and the GB of new blocks made on the device by
moving others out. After the table, the steps the shim saw end (its last 64:
the last timed steps, and the warm-up's where fewer ran), each with its uses
and the most bytes its live blocks required out of the device at once, at
the use where that was first reached: the next step sends blocks out before
that point, up to those bytes. Then the last complete step's first uses that the
step before did not foretell, each with what it and the step before named
first."""
import json
import os
import sys

import run_trace


def main():
    results, run = sys.argv[1], sys.argv[2]
    line = next(line for line in map(json.loads, open(results)) if line["name"] == run)
    result = line["result"]
    trace = run_trace.load(os.path.dirname(results), run)
    samples = trace["processes"][0]["moves"].get("samples", [])
    events = trace["events"]
    print(f"{run}: each timed step")
    print("step | ms | GB to the host | GB onto the device | job's memory ms | job's remaps ms | job's waits for room ms | mover's remaps ms | uses ms | of which waits ms | pinning ms | pinned beside unused host memory MB | kept blocks given back ms | of which ahead of need ms | kept ranges filled ms | looks ahead | found none in host | passed over, in use | short of room | uses foretold | not foretold | uses left in place | mover's moves | claimed back | out before the peak GB | out for the room kept free GB | out for room needed GB | made with room GB")
    begin = result["timed_ns"][0]
    for step, length in enumerate(result["step_ms_each"]):
        end = begin + length * 1e6
        moved = {"demote": 0, "promote": 0}
        for event in events:
            if begin <= event["t_ns"] < end and event["op"] in moved and event.get("rc", 0) == 0:
                moved[event["op"]] += event["size"]
        inside = [s for s in samples if begin <= s["t_ns"] <= end]

        def grew(key, unit, form):
            # A trace from a build before the counter was added: "-".
            if len(inside) < 2 or key not in inside[0]:
                return "-"
            return format((inside[-1][key] - inside[0][key]) / unit, form)

        cells = [grew(key, 1e6, ".0f") for key in (
            "memory_ns", "remap_ns", "mover_room_wait_ns", "mover_remap_ns", "uses_ns", "uses_wait_ns", "pinning_ns")]
        cells.append(grew("pinned_beside_unused_bytes", 2**20, ".0f"))
        cells += [grew(key, 1e6, ".0f") for key in ("give_back_ns", "give_back_ahead_ns", "hand_out_ns")]
        cells += [grew(key, 1, ".0f") for key in (
            "ahead_looks", "ahead_none_in_host", "ahead_passed_busy", "ahead_short_of_room",
            "replay_matched", "replay_missed", "left_in_place", "mover_moves", "mover_claimed")]
        cells += [grew(key, 1e9, ".1f") for key in (
            "out_before_peak_bytes", "out_kept_free_bytes", "out_for_room_bytes", "made_with_room_bytes")]
        print(f"{step + 1} | {length:.1f} | {moved['demote'] / 1e9:.2f} | {moved['promote'] / 1e9:.2f} | " + " | ".join(cells))
        begin = end
    peaks = trace["processes"][0]["moves"].get("step_peaks", [])
    if peaks:
        print()
        print("The steps the shim saw end, oldest first: uses; most required out of the device, GB at use (share of the step):")
        print("; ".join(f"{p['uses']}: {p['out_needed_bytes'] / 1e9:.2f} at {p['at']} ({p['at'] / max(p['uses'], 1):.2f})"
                        for p in peaks))
    misses = trace["processes"][0]["moves"].get("replay_misses", [])
    if misses:
        print()
        print("The last complete step's first uses not foretold (place in the step: named first; the step before, where the record had reached; its use naming that block first, uses from there):")
        for miss in misses:
            found = "not within 16" if miss.get("found_at") is None else f"{miss['found_at']:+d}"
            print(f"{miss['at']}: {miss['named']}; {miss.get('expected') or 'past its end'}; {found}")


if __name__ == "__main__":
    main()
