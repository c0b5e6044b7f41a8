//! `vramshare report FILE`: what a trace says, per process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;

use vramshare_common::event::{Op, Placement};
use vramshare_common::size::human_bytes;
use vramshare_common::trace_json::{EventJson, ProcessJson, TraceJson};

use crate::out::Failure;
use crate::show::{escaped, total};

const LARGEST: usize = 5;

pub fn report(file: &Path) -> Result<ExitCode, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let trace = TraceJson::parse(&text).map_err(|why| format!("{}: {why}", file.display()))?;
    crate::out::print(&render(&trace))?;
    Ok(ExitCode::SUCCESS)
}

fn size_list(blocks: &[(u64, &EventJson)]) -> String {
    blocks
        .iter()
        .take(LARGEST)
        .map(|(size, e)| {
            format!(
                "{} at {} ({}, {})",
                human_bytes(*size),
                escaped(&e.ptr),
                escaped(&e.api),
                escaped(e.placement.as_deref().unwrap_or("unknown"))
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The report as text.
pub fn render(trace: &TraceJson) -> String {
    let mut out = String::new();
    let mut pids: BTreeSet<u32> = trace.processes.iter().map(|p| p.pid).collect();
    pids.extend(trace.events.iter().map(|e| e.pid));
    if let Some(lost) = trace.events_lost.filter(|l| *l > 0) {
        out.push_str(&format!("{lost} events were overwritten in the ring before this dump: the counts below miss them\n\n"));
    }
    for pid in pids {
        let empty = ProcessJson {
            pid,
            ..ProcessJson::default()
        };
        let process = trace
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or(&empty);
        let events: Vec<&EventJson> = trace.events.iter().filter(|e| e.pid == pid).collect();
        out.push_str(&process_report(process, &events));
        out.push('\n');
    }
    out
}

fn process_report(process: &ProcessJson, events: &[&EventJson]) -> String {
    let mut out = format!(
        "process {}  {}\n",
        process.pid,
        if process.cmdline.is_empty() {
            "(command line not recorded)".into()
        } else {
            escaped(&process.cmdline)
        }
    );
    let mut devices: BTreeSet<String> = process
        .peak_device
        .keys()
        .chain(process.quota.keys())
        .cloned()
        .collect();
    devices.extend(
        events
            .iter()
            .filter(|e| e.device >= 0)
            .map(|e| e.device.to_string()),
    );
    for device in &devices {
        let of = |map: &BTreeMap<String, u64>| map.get(device).copied();
        let recorded = !process.cmdline.is_empty() || !process.quota.is_empty();
        let quota = match of(&process.quota) {
            Some(bytes) => human_bytes(bytes),
            None if recorded => "none".to_string(),
            None => "not recorded (the process's registry slot was taken by another)".to_string(),
        };
        let on_device = |e: &&&EventJson| e.device.to_string() == *device;
        let sum = |op: Op, placement: Option<Placement>| -> (usize, u64) {
            let chosen: Vec<_> = events
                .iter()
                .filter(on_device)
                .filter(|e| {
                    e.op() == Some(op) && (placement.is_none() || e.placement() == placement)
                })
                .collect();
            (chosen.len(), total(chosen.iter().map(|e| e.size)))
        };
        let (spills, _) = sum(Op::Alloc, Some(Placement::Host));
        // A spilled block's head may live on the device: count what went to the host.
        let spilled = total(events.iter().filter(on_device).map(|e| e.spilled_bytes()));
        let (promotions, promoted) = sum(Op::Promote, None);
        let (rejections, rejected) = sum(Op::Reject, None);
        let (demotions, demoted) = sum(Op::Demote, None);
        out.push_str(&format!("  device {}: quota {quota}", escaped(device)));
        if let Some(peak) = of(&process.peak_device) {
            out.push_str(&format!(
                ", peak on the device {}, peak spilled {}",
                human_bytes(peak),
                human_bytes(of(&process.peak_spilled).unwrap_or(0))
            ));
        }
        out.push('\n');
        out.push_str(&format!(
            "    spilled to host: {spills} allocations, {}; promoted back: {promotions}, {}; rejected: {rejections} ({})",
            human_bytes(spilled),
            human_bytes(promoted),
            human_bytes(rejected)
        ));
        // Quota cuts and pool neighbours move blocks to the host.
        if demotions > 0 {
            out.push_str(&format!(
                "; demoted to host: {demotions}, {}",
                human_bytes(demoted)
            ));
        }
        out.push('\n');
    }
    // A trace counts the tier's costs once it has had a block; the line
    // is for a tier that moved or waited.
    let moved = |m: &&vramshare_common::trace_json::MovesJson| {
        m.to_device + m.to_host > 0 || m.mover_room_wait_seconds + m.free_wait_seconds > 0.0
    };
    if let Some(moves) = process.moves.as_ref().filter(moved) {
        out.push_str(&moves_line(moves));
    }
    // Leaks: the shim's list at exit, or else what the events leave unfreed.
    let (leaks, leak_source): (Vec<(u64, String)>, &str) = if !process.leaked.is_empty() {
        (
            process
                .leaked
                .iter()
                .map(|l| {
                    (
                        l.size,
                        format!(
                            "{} at {} ({}, {})",
                            human_bytes(l.size),
                            escaped(&l.ptr),
                            escaped(&l.api),
                            escaped(&l.placement)
                        ),
                    )
                })
                .collect(),
            "at exit",
        )
    } else {
        let mut live: BTreeMap<u64, &EventJson> = BTreeMap::new();
        for event in events {
            let Some(ptr) = event.ptr_value() else {
                continue;
            };
            match event.op() {
                Some(Op::Alloc) => {
                    live.insert(ptr, event);
                }
                Some(Op::Free) => {
                    live.remove(&ptr);
                }
                _ => {}
            }
        }
        let mut blocks: Vec<(u64, &EventJson)> = live.values().map(|e| (e.size, *e)).collect();
        blocks.sort_by_key(|b| std::cmp::Reverse(b.0));
        (
            blocks
                .iter()
                .map(|(s, e)| (*s, size_list(&[(*s, e)])))
                .collect(),
            "not freed by the end of the trace",
        )
    };
    if leaks.is_empty() {
        out.push_str("  leaks: none\n");
    } else {
        let leaked = total(leaks.iter().map(|(s, _)| *s));
        let shown: Vec<&str> = leaks
            .iter()
            .take(LARGEST)
            .map(|(_, text)| text.as_str())
            .collect();
        let more = if leaks.len() > LARGEST {
            format!("; and {} more", leaks.len() - LARGEST)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "  leaks ({leak_source}): {} blocks, {}: {}{more}\n",
            leaks.len(),
            human_bytes(leaked),
            shown.join("; ")
        ));
    }
    let mut allocations: Vec<(u64, &EventJson)> = events
        .iter()
        .filter(|e| e.op() == Some(Op::Alloc))
        .map(|e| (e.size, *e))
        .collect();
    allocations.sort_by_key(|a| std::cmp::Reverse(a.0));
    if !allocations.is_empty() {
        out.push_str(&format!(
            "  largest allocations: {}\n",
            size_list(&allocations)
        ));
    }
    out.push_str(&crate::report_access::access_section(process));
    out
}

/// What the spill tier moved, in one line.
fn moves_line(moves: &vramshare_common::trace_json::MovesJson) -> String {
    let foretold = moves.replay_matched + moves.replay_missed;
    let ahead = if foretold > 0 {
        format!(
            "; {} of the moves onto the device ({}) ahead of need, the step before having named first what {:.0}% of the uses did ({:.0}% named first a block it never named)",
            moves.ahead_moves,
            human_bytes(moves.ahead_bytes),
            100.0 * moves.replay_matched as f64 / foretold as f64,
            100.0 * moves.replay_unseen as f64 / foretold as f64
        )
    } else {
        String::new()
    };
    let born = if moves.made_with_room_bytes > 0 {
        format!(
            "  new blocks made on the device by moving others out: {}\n",
            human_bytes(moves.made_with_room_bytes)
        )
    } else {
        String::new()
    };
    let before_peak = if moves.out_before_peak_bytes > 0 {
        format!(
            "  sent out as soon as idle, ahead of the step's peak: {}\n",
            human_bytes(moves.out_before_peak_bytes)
        )
    } else {
        String::new()
    };
    let for_room = if moves
        .out_kept_free_bytes
        .saturating_add(moves.out_for_room_bytes)
        > 0
    {
        format!(
            "  chosen to go out for the room kept free for moves: {}; for room needed at once: {}\n",
            human_bytes(moves.out_kept_free_bytes),
            human_bytes(moves.out_for_room_bytes)
        )
    } else {
        String::new()
    };
    let drains = if moves.drains_unread + moves.drains_for_room + moves.drains_quiet > 0 {
        format!(
            "  moves beside the kernels that drained the device all the same: {} after a launch vramshare could not read, {} for want of room among blocks whose uses are known, {} ending a quiet spell (no moves for a while, {} uses let through unrecorded in {} spells)\n",
            moves.drains_unread,
            moves.drains_for_room,
            moves.drains_quiet,
            moves.unrecorded_uses,
            moves.quiet_entered
        )
    } else {
        String::new()
    };
    let copier = if moves.copier_seconds > 0.0 {
        format!(
            "  copies out under way on the copier threads for {:.2} s, {:.2} s of it in the calls queuing their pieces\n",
            moves.copier_seconds, moves.copier_queue_seconds
        )
    } else {
        String::new()
    };
    let waits = if moves.mover_room_wait_seconds + moves.free_wait_seconds > 0.0 {
        format!(
            "  the job's threads waited for room {:.2} s for the mover's moves to land, {:.2} s for kept blocks' frees to be reached\n",
            moves.mover_room_wait_seconds, moves.free_wait_seconds
        )
    } else {
        String::new()
    };
    format!(
        "  moves: {} onto the device ({}), {} to the host ({}); {} uses left in place{}; {:.2} s copying and remapping ({:.2} s waiting for copies, {:.2} s remapping, {:.2} s making memory), {:.2} s waiting for the device first{} in {} rounds of moves; {} of new host memory pinned in {:.2} s{}, {} given back while live blocks remained{}{ahead}\n",
        moves.to_device,
        human_bytes(moves.bytes_to_device),
        moves.to_host,
        human_bytes(moves.bytes_to_host),
        moves.left_in_place,
        if moves.read_once_in_place > 0 {
            format!(
                ", {} more read in place (their block had served one use a trip)",
                moves.read_once_in_place
            )
        } else {
            String::new()
        },
        moves.seconds,
        moves.copy_seconds,
        moves.remap_seconds,
        moves.memory_seconds,
        moves.drain_seconds,
        // A trace written before the drains were counted has none.
        moves
            .drains
            .map_or_else(String::new, |drains| format!(", {drains} times")),
        moves.fetches,
        human_bytes(moves.pinned_bytes),
        moves.pinning_seconds,
        if moves.pinned_beside_unused_bytes > 0 {
            format!(
                " ({} of it while as much host memory lay unused that could not serve it)",
                human_bytes(moves.pinned_beside_unused_bytes)
            )
        } else {
            String::new()
        },
        human_bytes(moves.unpinned_bytes),
        if moves.mover_moves + moves.mover_claimed > 0 {
            format!(
                "; {} of the moves to the host made on the mover thread, in {:.2} s ({:.2} s waiting for copies, {:.2} s remapping, {:.2} s making and releasing memory), {} claimed back by work before they began ({:.2} s waited for by work that named a block on its way out)",
                moves.mover_moves,
                moves.mover_seconds,
                moves.mover_copy_seconds,
                moves.mover_remap_seconds,
                moves.mover_memory_seconds,
                moves.mover_claimed,
                moves.mover_claim_wait_seconds
            )
        } else {
            String::new()
        }
    ) + &born
        + &before_peak
        + &for_room
        + &drains
        + &copier
        + &waits
        + &host_line(moves)
}

/// The job's threads' own time in the shim's hooks (from the last sample)
/// and the costliest calls of the last marked step: what the shim adds to
/// the host's pace.
fn host_line(moves: &vramshare_common::trace_json::MovesJson) -> String {
    let Some(last) = moves.samples.last() else {
        return String::new();
    };
    if last.launch_hooks + last.other_hooks == 0 {
        return String::new();
    }
    let each = |ns: u64, calls: u64| ns as f64 / calls.max(1) as f64 / 1e3;
    let costliest: Vec<String> = moves
        .host_calls_last_step
        .iter()
        .take(3)
        .map(|call| {
            // Estimated from some of the calls: say from how many.
            let timed = if call.timed_calls > 0 && call.timed_calls < call.calls {
                format!(", {} timed", call.timed_calls)
            } else {
                String::new()
            };
            format!(
                "{} {:.1} ms ({} calls{timed})",
                call.name,
                call.seconds * 1e3,
                call.calls
            )
        })
        .collect();
    let step = if costliest.is_empty() {
        String::new()
    } else {
        format!(
            "; the last marked step's costliest: {}",
            costliest.join(", ")
        )
    };
    format!(
        "  the job's threads in the shim (launches, stream-ordered allocations and frees timed one in eight): {:.2} s in {} launches ({:.1} µs each, {:.2} s of it in CUDA calls of the shim's own), {:.2} s in {} other calls ({:.1} µs each, {:.2} s in CUDA calls){step}\n",
        last.launch_hooks_ns as f64 / 1e9,
        last.launch_hooks,
        each(last.launch_hooks_ns, last.launch_hooks),
        last.launch_hooks_cuda_ns as f64 / 1e9,
        last.other_hooks_ns as f64 / 1e9,
        last.other_hooks,
        each(last.other_hooks_ns, last.other_hooks),
        last.other_hooks_cuda_ns as f64 / 1e9,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramshare_common::trace_json::MovesJson;

    #[test]
    fn a_process_that_moved_blocks_says_how_many_how_much_and_how_long() {
        let process = ProcessJson {
            pid: 7,
            cmdline: "train".into(),
            moves: Some(MovesJson {
                to_device: 3,
                to_host: 2,
                bytes_to_device: 3 << 20,
                bytes_to_host: 2 << 20,
                left_in_place: 4,
                seconds: 1.5,
                drain_seconds: 0.25,
                copy_seconds: 1.0,
                remap_seconds: 0.25,
                memory_seconds: 0.5,
                pinning_seconds: 0.75,
                pinned_bytes: 4 << 20,
                unpinned_bytes: 1 << 20,
                fresh_bytes_to_device: 0,
                lent_bytes_to_device: 0,
                made_with_room_bytes: 0,
                fetches: 6,
                drains: Some(2),
                drains_unread: 0,
                drains_for_room: 0,
                mover_moves: 0,
                mover_seconds: 0.0,
                mover_claimed: 0,
                steps: 9,
                ..MovesJson::default()
            }),
            ..ProcessJson::default()
        };
        let report = process_report(&process, &[]);
        assert!(
            report.contains("  moves: 3 onto the device (3.00 MiB), 2 to the host (2.00 MiB); 4 uses left in place; 1.50 s copying and remapping (1.00 s waiting for copies, 0.25 s remapping, 0.50 s making memory), 0.25 s waiting for the device first, 2 times in 6 rounds of moves; 4.00 MiB of new host memory pinned in 0.75 s, 1.00 MiB given back while live blocks remained\n"),
            "{report}"
        );
        assert!(!report.contains("copier threads"), "{report}");
        assert!(!report.contains("ahead of the step's most"), "{report}");
        let mut repinned = process.clone();
        if let Some(moves) = repinned.moves.as_mut() {
            moves.pinned_beside_unused_bytes = 2 << 20;
        }
        let report = process_report(&repinned, &[]);
        assert!(
            report.contains("4.00 MiB of new host memory pinned in 0.75 s (2.00 MiB of it while as much host memory lay unused that could not serve it), 1.00 MiB given back"),
            "{report}"
        );
        // A trace from before the drains were counted gives no count.
        let mut older = process.clone();
        if let Some(moves) = older.moves.as_mut() {
            moves.drains = None;
        }
        let report = process_report(&older, &[]);
        assert!(
            report.contains("0.25 s waiting for the device first in 6 rounds of moves;"),
            "{report}"
        );
        // Moves beside the kernels say what the mover thread made.
        let mut beside = process.clone();
        if let Some(moves) = beside.moves.as_mut() {
            (moves.mover_moves, moves.mover_seconds, moves.mover_claimed) = (2, 0.5, 1);
            (
                moves.mover_copy_seconds,
                moves.mover_remap_seconds,
                moves.mover_memory_seconds,
            ) = (0.25, 0.125, 0.0625);
            (moves.drains_unread, moves.drains_for_room) = (3, 4);
            (
                moves.drains_quiet,
                moves.unrecorded_uses,
                moves.quiet_entered,
            ) = (1, 9000, 2);
            (moves.copier_seconds, moves.copier_queue_seconds) = (0.375, 0.0625);
            moves.out_before_peak_bytes = 3 << 20;
            (moves.out_kept_free_bytes, moves.out_for_room_bytes) = (1 << 20, 2 << 20);
        }
        let report = process_report(&beside, &[]);
        assert!(
            report.contains("  moves beside the kernels that drained the device all the same: 3 after a launch vramshare could not read, 4 for want of room among blocks whose uses are known, 1 ending a quiet spell (no moves for a while, 9000 uses let through unrecorded in 2 spells)\n"),
            "{report}"
        );
        assert!(
            report.contains("  sent out as soon as idle, ahead of the step's peak: 3.00 MiB\n"),
            "{report}"
        );
        assert!(
            report.contains("  chosen to go out for the room kept free for moves: 1.00 MiB; for room needed at once: 2.00 MiB\n"),
            "{report}"
        );
        assert!(
            report.contains("  copies out under way on the copier threads for 0.38 s, 0.06 s of it in the calls queuing their pieces\n"),
            "{report}"
        );
        assert!(
            report.contains("given back while live blocks remained; 2 of the moves to the host made on the mover thread, in 0.50 s (0.25 s waiting for copies, 0.12 s remapping, 0.06 s making and releasing memory), 1 claimed back by work before they began (0.00 s waited for by work that named a block on its way out)\n"),
            "{report}"
        );
        assert!(!report.contains("waited for room"), "{report}");
        assert!(!report.contains("in the shim"), "{report}");
        // What the job's threads spent in the shim, where it was counted.
        let mut timed = process.clone();
        if let Some(moves) = timed.moves.as_mut() {
            moves
                .samples
                .push(vramshare_common::trace_json::MovesSample {
                    launch_hooks: 1000,
                    launch_hooks_ns: 8_000_000,
                    launch_hooks_cuda_ns: 2_000_000,
                    other_hooks: 500,
                    other_hooks_ns: 50_000_000,
                    other_hooks_cuda_ns: 40_000_000,
                    ..Default::default()
                });
            moves.host_calls_last_step = vec![vramshare_common::trace_json::HostCallJson {
                name: "cudaMallocAsync".into(),
                kind: "hook".into(),
                calls: 250,
                timed_calls: 31,
                seconds: 0.02,
            }];
        }
        let report = process_report(&timed, &[]);
        assert!(
            report.contains("  the job's threads in the shim (launches, stream-ordered allocations and frees timed one in eight): 0.01 s in 1000 launches (8.0 µs each, 0.00 s of it in CUDA calls of the shim's own), 0.05 s in 500 other calls (100.0 µs each, 0.04 s in CUDA calls); the last marked step's costliest: cudaMallocAsync 20.0 ms (250 calls, 31 timed)\n"),
            "{report}"
        );
        // Allocations that waited for room say how long, and for what.
        let mut waiting = beside.clone();
        if let Some(moves) = waiting.moves.as_mut() {
            (moves.mover_room_wait_seconds, moves.free_wait_seconds) = (0.5, 0.25);
        }
        let report = process_report(&waiting, &[]);
        assert!(
            report.contains("\n  the job's threads waited for room 0.50 s for the mover's moves to land, 0.25 s for kept blocks' frees to be reached\n"),
            "{report}"
        );
        let quiet = process_report(&ProcessJson::default(), &[]);
        assert!(!quiet.contains("moves:"), "{quiet}");
        // Steps replayed say what came ahead and how well they were foretold.
        let mut replayed = beside.clone();
        if let Some(moves) = replayed.moves.as_mut() {
            (moves.ahead_moves, moves.ahead_bytes) = (1, 1 << 20);
            (
                moves.replay_matched,
                moves.replay_missed,
                moves.replay_unseen,
            ) = (3, 1, 1);
        }
        let report = process_report(&replayed, &[]);
        assert!(
            report.contains("claimed back by work before they began (0.00 s waited for by work that named a block on its way out); 1 of the moves onto the device (1.00 MiB) ahead of need, the step before having named first what 75% of the uses did (25% named first a block it never named)\n"),
            "{report}"
        );
    }
}
