//! The spill tier on the fake runtime: blocks over the quota are virtual
//! memory in host memory, and move onto the device (by a remap and a copy
//! at their own address) before the kernels that name them, while the
//! blocks whose next use is furthest make room. The fake's streams run
//! their work late, so a move not ordered after the job's kernels would
//! copy stale bytes and the checks here would see them.

mod common;
#[path = "common/sampler.rs"]
mod sampler;

use std::time::{Duration, Instant};

use common::*;
use sampler::{run_sampled, Sampled};
use serde_json::Value;
use vramshare_common::files::open_existing_mut;
use vramshare_common::registry::{Registry, RegistryFile};

/// The blocks moved out right before each move of `block` in.
fn moved_out_for(moves: &[(String, u64)], block: u64) -> Vec<u64> {
    moves
        .windows(2)
        .filter(|pair| pair[1] == ("promote".to_string(), block) && pair[0].0 == "demote")
        .map(|pair| pair[0].1)
        .collect()
}

#[test]
fn a_block_in_host_memory_is_on_the_device_before_the_kernel_that_names_it_with_its_bytes() {
    let run = client(
        Runtime::Fake13,
        // Work on the streams runs 20 ms after it is reached.
        &moving("8MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "20000")]),
        &[
            &THIRD_COMES_IN[..],
            &[
                "peekvia:a:1",
                "peekvia:b:2",
                "peekvia:c:1",
                "copyout:c:2",
                "sync",
                "hostbytes",
            ],
        ]
        .concat(),
    );
    run.assert_ok();
    let (a, b, c) = (
        hex(&run.field("malloc a", "ptr")),
        hex(&run.field("malloc b", "ptr")),
        hex(&run.field("malloc c", "ptr")),
    );
    let allocations = run.allocations();
    assert_eq!(
        allocations.iter().map(|a| a.1.as_str()).collect::<Vec<_>>(),
        ["device", "device", "host"],
        "c is over the quota: {allocations:?}"
    );
    // Each block holds what its kernel wrote, read through a pointer the
    // shim never saw, wherever the moves left it.
    for (name, byte) in [("a", "1"), ("b", "2"), ("c", "3")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(
            (log_field(line, "first"), log_field(line, "last")),
            (byte.to_string(), byte.to_string()),
            "{line}"
        );
    }
    assert_eq!(log_field(run.line("hostbytes"), "first"), "3");
    assert_eq!(log_field(run.line("hostbytes"), "last"), "3");
    // c came onto the device, at its own address, before the kernel that
    // filled it was launched: device memory was mapped there first.
    let launches: Vec<usize> = (0..run.calls.len())
        .filter(|i| run.calls[*i].contains("cudaLaunchKernel "))
        .collect();
    let fill_c = launches[2];
    let device_handles: Vec<String> = run
        .calls_with(&["cuMemCreate", "location=device"])
        .iter()
        .map(|c| log_field(c, "handle"))
        .collect();
    let mapped_c = run.calls[..fill_c]
        .iter()
        .rev()
        .find(|line| line.contains(&format!("cuMemMap ptr={c:#x} ")))
        .unwrap_or_else(|| panic!("c mapped before its kernel:\n{:#?}", run.calls));
    assert!(
        device_handles.contains(&log_field(mapped_c, "handle")),
        "{mapped_c} maps device memory"
    );
    let moves = tier_moves(&run);
    assert!(moves.contains(&("promote".into(), c)), "{moves:?}");
    let out: Vec<u64> = moves
        .iter()
        .filter(|m| m.0 == "demote")
        .map(|m| m.1)
        .collect();
    assert!(
        !out.is_empty() && out.iter().all(|p| *p == a || *p == b),
        "{moves:?}"
    );
    let process = &run.trace()["processes"][0];
    assert!(
        process["peak_device"]["0"].as_u64().unwrap() <= 8 * MIB,
        "{process}"
    );
}

/// A step that uses a, b, a, c, b: at c, the least recently used block is
/// b, but b is used next; a is not used again until the next step. Marked
/// by the job, so that the step before predicts the next uses. Each use is
/// two launches, so that every block serves two each time it comes in (a
/// block that served one is read in place at its next use instead, as
/// `tier_once` tests).
const STEP: [&str; 11] = [
    "step",
    "fill:a:1:0",
    "fill:a:1:0",
    "fill:b:2:0",
    "fill:b:2:0",
    "fill:a:3:0",
    "fill:a:3:0",
    "fill:c:4:0",
    "fill:c:4:0",
    "fill:b:5:0",
    "fill:b:5:0",
];

#[test]
fn eviction_moves_out_the_block_whose_next_use_is_furthest() {
    let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M", "repeat:4:11"];
    steps.extend(STEP);
    steps.extend(["peekvia:a:0", "peekvia:b:0", "peekvia:c:0"]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let (a, c) = (
        hex(&run.field("malloc a", "ptr")),
        hex(&run.field("malloc c", "ptr")),
    );
    let moves = tier_moves(&run);
    // The block moved out to make room for c, at each of c's uses after
    // the first step (which has no step before it to predict from).
    let victims: Vec<u64> = moved_out_for(&moves, c).into_iter().skip(1).collect();
    assert_eq!(victims, [a, a, a], "{moves:?}");
    for (name, byte) in [("a", "3"), ("b", "5"), ("c", "4")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(log_field(line, "first"), byte, "{line}");
    }
}

#[test]
fn without_marked_steps_eviction_moves_out_the_least_recently_used_block() {
    let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M", "repeat:4:10"];
    steps.extend(&STEP[1..]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let (b, c) = (
        hex(&run.field("malloc b", "ptr")),
        hex(&run.field("malloc c", "ptr")),
    );
    let moves = tier_moves(&run);
    let victims = moved_out_for(&moves, c);
    assert_eq!(victims, [b, b, b, b], "{moves:?}");
}

#[test]
fn device_bytes_never_exceed_the_quota_over_thousands_of_moves() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let trace = work.path().join("trace.json");
    let mut steps = vec![
        "malloc:a:2M",
        "malloc:b:2M",
        "malloc:c:2M",
        "repeat:1000:11",
    ];
    steps.extend(STEP);
    let vars = moving("4MiB", &[("VRAMSHARE_TRACE", trace.to_str().unwrap())]);
    let Sampled { samples, highest } = run_sampled(client_command(&shm, &vars, &steps), &shm);
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let moved = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] == "promote" || e["op"] == "demote")
        .count();
    assert!(moved >= 2000, "{moved} moves");
    assert!(samples >= 100, "{samples} samples");
    assert!(highest <= 4 * MIB, "device bytes reached {highest}");
    assert!(
        trace["processes"][0]["peak_device"]["0"].as_u64().unwrap() <= 4 * MIB,
        "the process's own peak"
    );
}

#[test]
fn a_quota_cut_moves_the_tiers_blocks_to_the_host_with_their_bytes() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let child = client_command(
        &shm,
        &moving("16MiB", &[]),
        &[
            "malloc:a:4M",
            "malloc:b:4M",
            "malloc:c:4M",
            "fill:a:1:0",
            "fill:b:2:0",
            "fill:c:3:0",
            "sync",
            "sleep:1500",
            "peekvia:a:0",
            "peekvia:b:0",
            "peekvia:c:0",
        ],
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    let began = Instant::now();
    let registry = loop {
        let found = open_existing_mut::<RegistryFile>(&shm)
            .ok()
            .and_then(|map| Registry::new(map).ok());
        if let Some(registry) = found.filter(|r| {
            r.live_slot(pid).is_some_and(|slot| {
                slot.devices()[0]
                    .device_bytes
                    .load(std::sync::atomic::Ordering::Relaxed)
                    == 12 * MIB
            })
        }) {
            break registry;
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the client's blocks"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let counters = &registry.live_slot(pid).unwrap().devices()[0];
    // What `vramshare quota set` writes.
    counters
        .quota
        .store(6 * MIB, std::sync::atomic::Ordering::Release);
    let cut = Instant::now();
    while counters
        .device_bytes
        .load(std::sync::atomic::Ordering::Acquire)
        > 6 * MIB
    {
        assert!(
            cut.elapsed() < Duration::from_secs(1),
            "held to the new quota"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        counters
            .spilled_bytes
            .load(std::sync::atomic::Ordering::Acquire),
        8 * MIB,
        "two of the three blocks went to the host"
    );
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    for (name, byte) in [("a", "1"), ("b", "2"), ("c", "3")] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("peekvia {name}")))
            .unwrap();
        assert_eq!(log_field(line, "first"), byte, "{line}");
    }
}

#[test]
fn blocks_moving_out_ahead_overlap_a_block_coming_in_and_every_block_keeps_its_bytes() {
    // Ten blocks of 2 MiB under a 16 MiB quota, whose move budget (an
    // eighth) holds one: after a block comes in, another moves out ahead.
    let names: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    let mut steps: Vec<String> = names.iter().map(|n| format!("malloc:{n}:2M")).collect();
    steps.push(format!("repeat:3:{}", names.len() + 1));
    steps.push("step".into());
    steps.extend(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("fill:{n}:{}:1", i + 1)),
    );
    steps.extend(names.iter().map(|n| format!("peekvia:{n}:2")));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    // Copies land only when the shim waits for them: a kernel let through
    // before then would see a block's old bytes, and its own writes would
    // be overwritten.
    let run = client(
        Runtime::Fake13,
        &moving(
            "16MiB",
            &[
                ("FAKE_CUDA_STREAM_DELAY_US", "2000"),
                ("FAKE_CUDA_DEFER_COPIES", "1"),
            ],
        ),
        &steps,
    );
    run.assert_ok();
    for (i, name) in names.iter().enumerate() {
        let line = run.line(&format!("peekvia {name}"));
        let byte = (i + 1).to_string();
        assert_eq!(
            (log_field(line, "first"), log_field(line, "last")),
            (byte.clone(), byte),
            "{line}"
        );
    }
    // Two copies at once: a move's copy followed by another's before the
    // shim waited for the first.
    let mut queued = 0;
    let mut overlapped = false;
    for call in &run.calls {
        if call.contains("cuMemcpyAsync ") {
            queued += 1;
            overlapped |= queued > 1;
        } else if call.contains("cuStreamSynchronize ") {
            queued = 0;
        }
    }
    assert!(overlapped, "{:#?}", run.calls);
    let moves = tier_moves(&run);
    assert!(
        moves
            .windows(2)
            .any(|pair| pair[0].0 == "promote" && pair[1].0 == "demote"),
        "{moves:?}"
    );
    let process = &run.trace()["processes"][0];
    assert!(process["peak_device"]["0"].as_u64().unwrap() <= 16 * MIB);
}

#[test]
fn where_the_job_marks_its_steps_a_block_comes_once_a_step_and_elsewhere_whenever_work_names_it() {
    // Three blocks of 4 MiB, two of which fit under the quota, each used
    // twice a step in turn: least recently used, each use finds its block
    // moved out. A kernel launched once a round marks where rounds begin,
    // so that steps are found in the launch sequence where they are not
    // marked. Each use is two launches (one that served a single launch
    // would be read in place as such, whether steps are marked or not).
    let run = |marked: bool| {
        let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M"];
        let uses = [
            "opaque:rt:a",
            "fill:a:1:1",
            "fill:b:2:1",
            "fill:b:2:1",
            "kernel:rt:c:-:-",
            "kernel:rt:c:-:-",
            "kernel:rt:a:-:-",
            "kernel:rt:a:-:-",
            "fill:b:2:1",
            "fill:b:2:1",
            "kernel:rt:c:-:-",
            "kernel:rt:c:-:-",
        ];
        let body: Vec<&str> = if marked { vec!["step"] } else { vec![] }
            .into_iter()
            .chain(uses.iter().copied())
            .collect();
        let repeat = format!("repeat:8:{}", body.len());
        steps.push(&repeat);
        steps.extend(body.iter());
        let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
        run.assert_ok();
        let moves = run.moves().clone();
        let promotes = tier_moves(&run)
            .iter()
            .filter(|(op, _)| op == "promote")
            .count();
        let steps = moves["steps"].as_u64().unwrap();
        // The samples count them as they come; the last, at exit, all.
        let last = run.last_sample();
        assert_eq!(last["left_in_place"], moves["left_in_place"], "{moves:#}");
        (promotes, moves["left_in_place"].as_u64().unwrap(), steps)
    };
    let (marked_in, marked_left, _) = run(true);
    let (unmarked_in, unmarked_left, found) = run(false);
    assert!(
        marked_left > 0,
        "marked: {marked_in} in, {marked_left} left in place"
    );
    assert!(found > 0, "steps found in the launch sequence");
    assert_eq!(
        unmarked_left, 0,
        "unmarked: {unmarked_in} in, {found} steps found"
    );
    assert!(
        unmarked_in > marked_in,
        "in: {unmarked_in} unmarked, {marked_in} marked"
    );
}

#[test]
fn freeing_blocks_that_moved_gives_back_every_mapping_and_handle_once() {
    // c starts in host memory; the uses (two a block each time, so that
    // none is read in place as one that served a single use) move each
    // block in and out.
    let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M", "repeat:3:6"];
    steps.extend(["fill:a:1:0", "fill:a:1:0", "fill:c:3:0", "fill:c:3:0"]);
    steps.extend(["fill:b:2:0", "fill:b:2:0"]);
    steps.extend(["sync", "free:a", "free:b", "free:c"]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let moves = tier_moves(&run);
    assert!(moves.len() >= 6, "{moves:?}");
    for name in ["a", "b", "c"] {
        assert_eq!(run.rc(&format!("free {name}")), 0, "{}", run.stdout);
    }
    let created: Vec<String> = run
        .calls_with(&["cuMemCreate", "rc=0"])
        .iter()
        .map(|c| log_field(c, "handle"))
        .collect();
    let released: Vec<String> = run
        .calls_with(&["cuMemRelease", "rc=0"])
        .iter()
        .map(|c| log_field(c, "handle"))
        .collect();
    let mut once = released.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), released.len(), "released twice: {released:?}");
    let mut made = created.clone();
    made.sort();
    assert_eq!(made, once, "every handle made is released");
    let ranges = run.calls_with(&["cuMemAddressFree"]);
    assert_eq!(ranges.len(), 3, "{ranges:?}");
    assert!(ranges.iter().all(|c| c.contains("rc=0")), "{ranges:?}");
}

#[test]
fn a_captured_graph_brings_its_blocks_in_at_its_launch_and_nothing_moves_while_capturing() {
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "malloc:a:4M",
            "malloc:b:4M",
            "malloc:c:4M",
            "capture",
            "kernel:rt:c:-:-",
            "endcapture",
            "instantiate",
            "sleep:1",
            "replay",
            "sync",
        ],
    );
    run.assert_ok();
    let c = hex(&run.field("malloc c", "ptr"));
    let moves = tier_moves(&run);
    assert!(moves.contains(&("promote".into(), c)), "{moves:?}");
    // The first move came with the graph's launch, none before it: the
    // capture itself ran nothing.
    let replay = run
        .calls
        .iter()
        .position(|c| c.contains("cudaGraphLaunch"))
        .expect("the replay");
    let first_copy = run
        .calls
        .iter()
        .position(|c| c.contains("cuMemcpyAsync "))
        .expect("a move");
    let captured_end = run
        .calls
        .iter()
        .position(|c| c.contains("cudaStreamEndCapture"))
        .expect("the capture's end");
    assert!(
        first_copy > captured_end && first_copy < replay,
        "moved after the capture ended and before the graph launched: {:#?}",
        run.calls
    );
}

#[test]
fn exporting_a_tier_block_for_another_process_is_refused_and_says_how_to_share_it() {
    let steps = ["malloc:a:4M", "ipc:a"];
    let moves = |on: &str| {
        client(
            Runtime::Fake13,
            &[
                ("VRAMSHARE_QUOTA", "16MiB"),
                ("VRAMSHARE_MOVES", on),
                ("FAKE_CUDA_DEVICES", "1"),
                ("VRAMSHARE_LOG", "warn"),
            ],
            &steps,
        )
    };
    let run = moves("on");
    run.assert_ok();
    assert_ne!(run.rc("ipc a"), 0, "CUDA's own refusal, passed on");
    assert!(run.stderr.contains("VRAMSHARE_MOVES=off"), "{}", run.stderr);
    let run = moves("off");
    run.assert_ok();
    assert_eq!(run.rc("ipc a"), 0, "cudaMalloc's memory exports");
}

#[test]
fn a_process_that_sees_two_gpus_keeps_its_blocks_where_they_are_made() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "8MiB"),
            ("VRAMSHARE_MOVES", "on"),
            ("FAKE_CUDA_DEVICES", "2"),
        ],
        &[
            "malloc:a:4M",
            "malloc:b:4M",
            "malloc:c:4M",
            "fill:c:3:0",
            "peekvia:c:0",
        ],
    );
    run.assert_ok();
    assert!(
        run.calls_with(&["cuMemCreate"]).is_empty(),
        "no block of the tier's: {:#?}",
        run.calls
    );
    assert_eq!(
        run.calls_with(&["cudaMallocManaged"]).len(),
        1,
        "c spilled as managed memory"
    );
    assert_eq!(log_field(run.line("peekvia c"), "first"), "3");
    assert!(tier_moves(&run).is_empty());
}

#[test]
fn the_trace_samples_the_moves_counters_over_time_ending_at_their_totals() {
    // Three blocks of 4 MiB, two of which fit: each round moves blocks in
    // and out, and the pause lets the shim's thread sample between rounds.
    // (Each block is used twice a round: one that served a single use would
    // be read in place from its second round on.)
    let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M", "repeat:6:7"];
    steps.extend(["fill:a:1:0", "fill:a:1:0", "fill:b:2:0", "fill:b:2:0"]);
    steps.extend(["fill:c:3:0", "fill:c:3:0", "sleep:120"]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let moves = run.moves();
    let samples = moves["samples"].as_array().unwrap();
    assert!(samples.len() >= 3, "{moves:#}");
    let field = |sample: &serde_json::Value, key: &str| sample[key].as_u64().unwrap();
    let counters = [
        "t_ns",
        "bytes_to_device",
        "bytes_to_host",
        "move_ns",
        "fetches",
    ];
    for (pair, key) in samples.windows(2).flat_map(|p| counters.map(|k| (p, k))) {
        assert!(
            field(&pair[0], key) <= field(&pair[1], key),
            "{key}: {pair:?}"
        );
    }
    // Sampled as the run went: the first after some moves, before the last.
    let (first, last) = (&samples[0], samples.last().unwrap());
    let moved = |sample| field(sample, "bytes_to_device");
    assert!(moved(first) < moved(last), "{moves:#}");
    for key in ["bytes_to_device", "bytes_to_host", "fetches"] {
        assert_eq!(field(last, key), moves[key].as_u64().unwrap(), "{key}");
    }
    // The parts are parts of what they split, once no move is under way (a
    // sample taken during one may see a part counted before its whole).
    assert!(
        field(last, "remap_to_host_ns") <= field(last, "remap_ns"),
        "{last}"
    );
    let device = field(last, "device_create_ns") + field(last, "device_release_ns");
    assert!(device <= field(last, "memory_ns"), "{last}");
    assert!(field(last, "queue_ns") <= field(last, "move_ns"), "{last}");
    assert!(field(last, "remap_to_host_ns") > 0, "{last}");
    // The three allocations each made a new block, no kept block serving.
    assert_eq!(field(last, "placed"), 3, "{last}");
    assert!(field(last, "place_ns") > 0, "{last}");
}
