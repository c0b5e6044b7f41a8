//! Moves beside the job's kernels (`VRAMSHARE_MOVES=overlap`), on the fake
//! runtime, whose streams run their work later than it is given
//! (`FAKE_CUDA_STREAM_DELAY_US`), as a GPU does: a block goes out only once
//! the kernels that named it have finished (the fake driver logs an unmap
//! of memory that a queued or running kernel points into as `busy`), a
//! block comes in before the kernel that names it runs, and no move waits
//! for the whole device unless a launch the shim could not read may still
//! run.

mod common;
#[path = "common/sampler.rs"]
mod sampler;

use common::*;
use sampler::{run_sampled, Sampled};

fn overlapping<'a>(quota: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    // Every piece of work on a stream runs 20 ms after it is reached.
    let mut vars = moving_beside(quota, &[("FAKE_CUDA_STREAM_DELAY_US", "20000")]);
    vars.extend_from_slice(more);
    vars
}

#[test]
fn a_block_goes_out_beside_other_kernels_only_once_its_own_have_finished() {
    let mut steps = THIRD_COMES_IN.to_vec();
    steps.extend([
        "copyout:c:1",
        "sync",
        "hostbytes",
        "peekvia:a:1",
        "peekvia:b:1",
    ]);
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let busy = busy_unmaps(&run);
    assert!(busy.is_empty(), "unmapped under a kernel: {busy:#?}");
    // Every block holds what its kernel wrote, wherever it is now.
    copied_bytes_hold(&run, "3");
    for (name, byte) in [("a", "1"), ("b", "2")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(log_field(line, "first"), byte, "{line}");
        assert_eq!(log_field(line, "last"), byte, "{line}");
    }
    let c = hex(&run.field("malloc c", "ptr"));
    let moved = tier_moves(&run);
    assert!(moved.contains(&("promote".to_string(), c)), "{moved:?}");
    assert!(moved.iter().any(|(op, _)| op == "demote"), "{moved:?}");
    // Beside the kernels: the device was never drained for the moves.
    let moves = run.moves();
    assert!(moves["fetches"].as_u64().unwrap() >= 1, "{moves:#}");
    assert_eq!(moves["drain_seconds"].as_f64(), Some(0.0), "{moves:#}");
    assert_eq!(moves["drains"], 0, "{moves:#}");
    // The copies out were made on the copier thread, and timed there.
    let copier = moves["copier_seconds"].as_f64().unwrap();
    let queuing = moves["copier_queue_seconds"].as_f64().unwrap();
    assert!(
        copier > 0.0 && queuing > 0.0 && queuing <= copier,
        "{moves:#}"
    );
}

#[test]
fn a_new_block_that_finds_no_room_is_made_on_the_device_by_moving_out_a_finished_one() {
    // a and b fill the quota, their kernels still queued when c is made.
    let steps = [
        "malloc:a:4M",
        "malloc:b:4M",
        "fill:a:1:1",
        "fill:b:2:1",
        "malloc:c:4M",
        "fill:c:3:1",
        "copyout:c:1",
        "sync",
        "hostbytes",
        "peekvia:a:1",
        "peekvia:b:1",
    ];
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    // c is made on the device: no host memory is made for it, and nothing
    // copies its unwritten bytes in.
    assert_eq!(placements(&run), ["device", "device", "device"]);
    let c = hex(&run.field("malloc c", "ptr"));
    let moved = tier_moves(&run);
    assert!(!moved.contains(&("promote".to_string(), c)), "{moved:?}");
    assert!(moved.iter().any(|(op, _)| op == "demote"), "{moved:?}");
    let moves = run.moves();
    assert_eq!(moves["made_with_room_bytes"], 4 * MIB, "{moves:#}");
    // Under the quota throughout, and beside the kernels: no drain.
    let peak = run.trace()["processes"][0]["peak_device"]["0"].as_u64();
    assert!(peak.unwrap() <= 8 * MIB, "{peak:?}");
    assert_eq!(moves["drain_seconds"].as_f64(), Some(0.0), "{moves:#}");
    // The block that went out did so once its kernel had finished.
    let busy = busy_unmaps(&run);
    assert!(busy.is_empty(), "unmapped under a kernel: {busy:#?}");
    copied_bytes_hold(&run, "3");
    peeks_hold(&run, &[("a", "1"), ("b", "2")]);
}

#[test]
fn after_a_launch_the_shim_could_not_read_a_new_block_that_finds_no_room_goes_to_host_memory() {
    // As above, but a kernel the shim cannot read may still run: no block
    // may move beside it, so c is made in host memory.
    let steps = [
        "malloc:a:4M",
        "malloc:b:4M",
        "fill:a:1:1",
        "fill:b:2:1",
        "opaque:rt:a",
        "malloc:c:4M",
        "fill:c:3:1",
        "copyout:c:1",
        "sync",
        "hostbytes",
    ];
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host"]);
    assert_eq!(run.moves()["made_with_room_bytes"], 0, "{:#}", run.moves());
    assert_eq!(log_field(run.line("hostbytes"), "first"), "3");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
}

#[test]
fn a_block_comes_in_before_the_kernel_that_names_it_runs() {
    // The tier's copies are held back until something waits for them, as
    // a copy engine may still be busy when the kernel is reached.
    let vars = overlapping("8MiB", &[("FAKE_CUDA_DEFER_COPIES", "1")]);
    let mut steps = THIRD_COMES_IN.to_vec();
    steps.extend(["copyout:c:1", "sync", "hostbytes"]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    // The kernel's stream was made to wait for c's copy: what it wrote is
    // what c holds, not the bytes the copy brought.
    assert!(
        !run.calls_with(&["cuStreamWaitEvent"]).is_empty(),
        "{:#?}",
        run.calls
    );
    copied_bytes_hold(&run, "3");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
}

#[test]
fn after_a_launch_the_shim_could_not_read_the_next_move_waits_for_the_device() {
    let mut steps = THIRD_COMES_IN[..5].to_vec();
    // A kernel with no layout the shim can read, given a's address: it may
    // touch any block, so c's move waits for it as moves with `on` do.
    steps.extend([
        "opaque:rt:a",
        "fill:c:3:1",
        "copyout:c:1",
        "sync",
        "hostbytes",
    ]);
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    let moves = run.moves();
    assert!(moves["drain_seconds"].as_f64().unwrap() > 0.0, "{moves:#}");
    // The trace says why.
    assert_eq!(moves["drains_unread"], 1, "{moves:#}");
    assert_eq!(moves["drains_for_room"], 0, "{moves:#}");
    assert_eq!(moves["drains"], 1, "{moves:#}");
    assert_eq!(log_field(run.line("hostbytes"), "first"), "3");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
}

#[test]
fn moves_with_on_drain_the_device_and_never_unmap_under_a_kernel() {
    let mut steps = THIRD_COMES_IN.to_vec();
    steps.extend(["copyout:c:1", "sync", "hostbytes"]);
    let vars = moving("8MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "20000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    let moves = run.moves();
    assert!(moves["drain_seconds"].as_f64().unwrap() > 0.0);
    // With `on`, every round of moves drained the device first, and the
    // job's threads made the copies.
    assert!(moves["drains"].as_u64().unwrap() >= 1, "{moves:#}");
    assert_eq!(moves["copier_seconds"].as_f64(), Some(0.0), "{moves:#}");
    assert_eq!(moves["drains"], moves["fetches"], "{moves:#}");
    assert_eq!(log_field(run.line("hostbytes"), "first"), "3");
}

#[test]
fn a_block_handed_out_again_goes_out_only_with_the_device_drained_until_work_names_it() {
    // w gets a's block back and no work names it, as a library's own
    // workspace that its calls do not name. Then a kernel names c and d,
    // and d comes in: only w could make room, and the uses known were a's,
    // so it goes out with the device drained.
    let steps = [
        "async:a:4M:1",
        "fill:a:1:1",
        "freeasync:a:1",
        "async:w:4M:1",
        "async:c:4M:1",
        "async:d:4M:1",
        "fill:c:3:1",
        "kernel:rt:c:d:-",
        "sync",
    ];
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    let (a, w) = (ptr_of_step(&run, "async a"), ptr_of_step(&run, "async w"));
    assert_eq!(w, a, "a's block again");
    let moved = tier_moves(&run);
    assert!(moved.contains(&("demote".to_string(), w)), "{moved:?}");
    let moves = run.moves();
    assert!(moves["drain_seconds"].as_f64().unwrap() > 0.0, "{moves:#}");
    assert_eq!(moves["drains_for_room"], 1, "{moves:#}");
    assert_eq!(moves["drains_unread"], 0, "{moves:#}");
    assert_eq!(moves["drains"], 1, "{moves:#}");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
}

fn ptr_of_step(run: &Run, step: &str) -> u64 {
    hex(&run.field(step, "ptr"))
}

#[test]
fn a_kernel_given_a_pointer_into_a_block_keeps_it_from_moving_until_it_is_done() {
    let steps = [
        "malloc:a:4M",
        "malloc:b:4M",
        "malloc:c:4M",
        "fill:a:1:1",
        "fill:b:2:1",
        // From a's second MiB on, through a pointer into it.
        "fill:a+1048576:9:1",
        "fill:b+1048576:8:1",
        "fill:c:3:1",
        "sync",
        "peekvia:a:1",
        "peekvia:b:1",
    ];
    let run = client(Runtime::Fake13, &overlapping("8MiB", &[]), &steps);
    run.assert_ok();
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    assert!(tier_moves(&run).iter().any(|(op, _)| op == "demote"));
    for (name, first, last) in [("a", "1", "9"), ("b", "2", "8")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(
            (log_field(line, "first"), log_field(line, "last")),
            (first.into(), last.into()),
            "{line}"
        );
    }
}

/// Eight blocks fill a 32 MiB quota (a move budget of 4 MiB) and have
/// finished their kernels; a ninth, in host memory, is filled: it comes in
/// in place of one, and another goes out ahead of need, on the mover thread.
fn ninth_comes_in() -> Vec<String> {
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    let mut steps: Vec<String> = names.iter().map(|n| format!("malloc:{n}:4M")).collect();
    for (byte, name) in names[..8].iter().enumerate() {
        steps.push(format!("fill:{name}:{}:1", byte + 1));
    }
    steps.extend(["sync".into(), "fill:i:9:1".into()]);
    steps
}

#[test]
fn a_block_goes_out_ahead_of_need_on_the_mover_thread_with_its_bytes() {
    let mut steps = ninth_comes_in();
    // The peeks read through pointers the shim does not see, which a move
    // beside them would unmap for a moment (what `overlap` trusts no
    // kernel does): they come once the mover's move has had time to end.
    steps.extend(["sync".into(), "sleep:200".into()]);
    for name in ["a", "b", "c", "i"] {
        steps.push(format!("peekvia:{name}:1"));
    }
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &overlapping("32MiB", &[]), &steps);
    run.assert_ok();
    let moves = run.moves();
    assert!(moves["mover_moves"].as_u64().unwrap() >= 1, "{moves:#}");
    assert!(moves["mover_seconds"].as_f64().unwrap() > 0.0, "{moves:#}");
    // The samples count them as they are made; the last, at exit, all.
    let last = run.last_sample();
    assert_eq!(last["mover_moves"], moves["mover_moves"], "{moves:#}");
    // Its time is split by what it waited for, its own and not the job's
    // threads': its copies (the fake's streams run 20 ms late) and remaps.
    let part = |key: &str| moves[key].as_f64().unwrap();
    assert!(part("mover_copy_seconds") > 0.0, "{moves:#}");
    assert!(part("mover_remap_seconds") > 0.0, "{moves:#}");
    let parts =
        part("mover_copy_seconds") + part("mover_remap_seconds") + part("mover_memory_seconds");
    assert!(parts <= part("mover_seconds"), "{moves:#}");
    // Its calls cannot end a capture made by the job's threads.
    assert!(
        !run.calls_with(&["cuThreadExchangeStreamCaptureMode", "mode=2"])
            .is_empty(),
        "{:#?}",
        run.calls
    );
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    peeks_hold(&run, &[("a", "1"), ("b", "2"), ("c", "3"), ("i", "9")]);
}

#[test]
fn work_that_names_a_block_handed_to_the_mover_keeps_it_or_waits_for_its_move() {
    // b, the least recently used left on the device, is handed to the
    // mover as i comes in; a kernel writes it at once. Mapping host memory
    // takes 50 ms, so that b's move cannot have ended before the kernel
    // names it however the threads are scheduled; the sleep outlasts the
    // mover's moves before the peeks.
    let mut steps = ninth_comes_in();
    steps.extend(["fill:b:7:1".into(), "sync".into(), "sleep:200".into()]);
    for name in ["b", "c", "i"] {
        steps.push(format!("peekvia:{name}:1"));
    }
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = overlapping("32MiB", &[("FAKE_CUDA_HOST_ACCESS_DELAY_MS", "50")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let moves = run.moves();
    let handed = moves["mover_moves"].as_u64().unwrap() + moves["mover_claimed"].as_u64().unwrap();
    assert!(handed >= 1, "{moves:#}");
    // The fill named b while its move was waiting (dropped) or under way,
    // its copy landing 20 ms late (waited for, and counted so).
    let claimed = moves["mover_claimed"].as_u64().unwrap();
    let waited = moves["mover_claim_wait_seconds"].as_f64().unwrap();
    assert!(claimed >= 1 || waited > 0.0, "{moves:#}");
    // The samples count the claims too; the last, at exit, all of them.
    let last = run.last_sample();
    assert_eq!(last["mover_claimed"], moves["mover_claimed"], "{moves:#}");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    peeks_hold(&run, &[("b", "7"), ("c", "3"), ("i", "9")]);
}

#[test]
fn a_job_that_exits_with_moves_handed_to_the_mover_exits_at_once_with_its_trace() {
    // i comes in and a block is handed to the mover; the job exits at once.
    let steps = ninth_comes_in();
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let began = std::time::Instant::now();
    let run = client(Runtime::Fake13, &overlapping("32MiB", &[]), &steps);
    run.assert_ok();
    // Its streams' 20 ms delays aside, nothing waits long at exit.
    assert!(began.elapsed() < std::time::Duration::from_secs(5));
    // The trace, written at exit, has the moves.
    let moves = run.moves();
    assert!(moves["to_device"].as_u64().unwrap() >= 1, "{moves:#}");
}

/// Nine 2 MiB blocks under 16 MiB (a move budget of one block), filled in
/// turn `times` times over, with `more` after each round of fills, while
/// the registry is sampled: checks that neither the sampler nor the
/// process's own peak saw device bytes above the quota, and gives the
/// samples taken and the trace's moves.
fn nine_blocks_sampled(times: u32, more: &[&str]) -> (u64, serde_json::Value) {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let trace = work.path().join("trace.json");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    let mut steps: Vec<String> = names.iter().map(|n| format!("malloc:{n}:2M")).collect();
    // Two fills a block a round: a block that served one use each time it
    // came in would be read in place from then on.
    steps.push(format!("repeat:{times}:{}", 2 * names.len() + more.len()));
    steps.extend(
        names
            .iter()
            .flat_map(|n| [format!("fill:{n}:1:1"), format!("fill:{n}:1:1")]),
    );
    steps.extend(more.iter().map(|step| step.to_string()));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = overlapping(
        "16MiB",
        &[
            ("FAKE_CUDA_STREAM_DELAY_US", "0"),
            ("VRAMSHARE_TRACE", trace.to_str().unwrap()),
        ],
    );
    let Sampled { samples, highest } = run_sampled(client_command(&shm, &vars, &steps), &shm);
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(highest <= 16 * MIB, "device bytes reached {highest}");
    assert!(
        trace["processes"][0]["peak_device"]["0"].as_u64().unwrap() <= 16 * MIB,
        "the process's own peak"
    );
    (samples, trace["processes"][0]["moves"].clone())
}

#[test]
fn the_mover_threads_moves_never_take_device_bytes_above_the_quota() {
    // Every fill moves, and the moves out go to the mover thread.
    let (samples, moves) = nine_blocks_sampled(300, &[]);
    assert!(moves["to_host"].as_u64().unwrap() >= 1000, "{moves:#}");
    assert!(moves["mover_moves"].as_u64().unwrap() >= 100, "{moves:#}");
    // The fills of blocks in host memory waited for the room those moves
    // free as they land, and the trace counts the time.
    assert!(
        moves["mover_room_wait_seconds"].as_f64().unwrap() > 0.0,
        "{moves:#}"
    );
    assert!(samples >= 100, "{samples} samples");
}

#[test]
fn new_blocks_made_on_the_device_by_moving_others_out_never_take_device_bytes_above_the_quota() {
    // Between the rounds of fills a 4 MiB block is made, filled and freed:
    // each finds no room and is made on the device by moving others out.
    let (samples, moves) = nine_blocks_sampled(200, &["malloc:t:4M", "fill:t:7:1", "free:t"]);
    assert!(
        moves["made_with_room_bytes"].as_u64().unwrap() >= 100 * 4 * MIB,
        "{moves:#}"
    );
    assert!(samples >= 20, "{samples} samples");
}

#[test]
fn blocks_the_step_before_named_come_onto_the_device_ahead_of_the_launches_that_name_them() {
    // Twenty-four 2 MiB blocks under 32 MiB, filled in turn each marked
    // step, each fill waited for: from the second step on, the step before
    // says which blocks the next fills name, and those in host memory come
    // ahead, beside the kernels, while the fill before runs, into the room
    // free beyond an eighth of the quota (4 MiB), the mover thread keeping
    // a quarter (8 MiB) free. Copies land only once waited for, and the
    // blocks are read back by copies, which the shim orders after their
    // copies in (a kernel reaching a block through a pointer the shim does
    // not see is not ordered so, as the README says of `overlap`).
    let names: Vec<String> = (0..24).map(|i| format!("b{i}")).collect();
    let mut steps: Vec<String> = names.iter().map(|n| format!("malloc:{n}:2M")).collect();
    steps.push(format!("repeat:4:{}", 2 * names.len() + 1));
    steps.push("step".into());
    for (byte, name) in names.iter().enumerate() {
        steps.push(format!("fill:{name}:{}:1", byte + 1));
        steps.push("sync".into());
    }
    steps.push("sync".into());
    for name in &names {
        steps.extend([
            format!("copyout:{name}:1"),
            "sync".into(),
            "hostbytes".into(),
        ]);
    }
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let vars = overlapping(
        "32MiB",
        &[
            ("FAKE_CUDA_STREAM_DELAY_US", "2000"),
            ("FAKE_CUDA_DEFER_COPIES", "1"),
        ],
    );
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let moves = run.moves();
    // Over the steps after the first, blocks came ahead into the room to
    // spare.
    assert!(moves["ahead_moves"].as_u64().unwrap() >= 3, "{moves:#}");
    assert!(
        moves["ahead_bytes"].as_u64().unwrap() >= 3 * 2 * MIB,
        "{moves:#}"
    );
    // Every fill of the steps after the first was where the step before
    // had it; the copies out after the last fills were not.
    assert!(
        moves["replay_matched"].as_u64().unwrap() >= 3 * 24,
        "{moves:#}"
    );
    assert_eq!(moves["replay_missed"].as_u64().unwrap(), 24, "{moves:#}");
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    // Each block copied out (a copy the shim sees, so ordered after the
    // block's copy in) holds what its last fill wrote.
    let read: Vec<(String, String)> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("hostbytes "))
        .map(|l| {
            (
                log_field(l, "first").to_string(),
                log_field(l, "last").to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = (1..=names.len())
        .map(|byte| (byte.to_string(), byte.to_string()))
        .collect();
    assert_eq!(read, expected);
}

/// A product's blocks under a queued product: a, b and c fill the quota
/// (beside the handle's workspace w, when `workspace`, made and filled
/// first, so that it is the least recently named) and e waits in host
/// memory. The product, on stream 2, reads a and b and writes c 20 ms after
/// its call; then e comes in on stream 1, and a block must go out for it,
/// but only one the product does not use, or once it has run.
fn product_then_a_block_comes_in(workspace: bool) -> Run {
    let w: &[&str] = if workspace { &["w"] } else { &[] };
    let mut steps: Vec<String> = Vec::new();
    for name in w.iter().chain(&["a", "b", "c", "e"]) {
        steps.push(format!("malloc:{name}:4M"));
    }
    for (name, byte) in w
        .iter()
        .map(|w| (*w, 7))
        .chain([("a", 1), ("b", 2), ("c", 9)])
    {
        steps.push(format!("fill:{name}:{byte}:1"));
    }
    steps.push("sync".into());
    if workspace {
        steps.push("workspace:w".into());
    }
    steps.extend(["gemm:a:b:c:2048:2048:2", "fill:e:4:1", "sync"].map(String::from));
    steps.extend(["a", "b", "c", "e"].map(|name| format!("peekvia:{name}:1")));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let quota = if workspace { "16MiB" } else { "12MiB" };
    let run = client(Runtime::Fake13, &overlapping(quota, &[]), &steps);
    run.assert_ok();
    assert_eq!(run.rc("gemm"), 0);
    assert!(busy_unmaps(&run).is_empty(), "{:#?}", run.calls);
    peeks_hold(&run, &[("a", "1"), ("b", "2"), ("c", "3"), ("e", "4")]);
    run
}

#[test]
fn a_product_whose_call_carries_no_stream_holds_its_blocks_until_its_kernel_has_run() {
    // cublasGemmEx takes its stream from its handle: the kernel it launches
    // says where its use runs.
    let run = product_then_a_block_comes_in(false);
    let moves = run.moves();
    assert!(moves["to_host"].as_u64().unwrap() >= 1, "{moves:#}");
}

#[test]
fn a_product_holds_the_workspace_set_on_its_handle_until_its_kernel_has_run() {
    // cuBLAS's kernels may sum in the workspace set on the handle (PyTorch
    // sets one), which no operand of the call shows: the workspace, idle as
    // far as its own uses go, stays until the product has run.
    let run = product_then_a_block_comes_in(true);
    assert_eq!(run.rc("workspace"), 0);
}
