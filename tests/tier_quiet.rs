//! A quiet tier (moves beside the kernels, on the fake runtime): once
//! thousands of uses have passed with no move, no block in host memory and
//! none leaving, uses go unrecorded (no event per use), and the first move
//! after drains the device, so that no block leaves under a kernel whose
//! use was not recorded.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::{Duration, Instant};

use common::*;
use vramshare_common::files::open_existing_mut;
use vramshare_common::registry::{Registry, RegistryFile};

/// The events the shim recorded through the runtime, as its trace counts
/// its own CUDA calls.
fn event_records(run: &Run) -> u64 {
    run.host_calls(Some("cuda"), |name| name == "cudaEventRecord")
}

#[test]
fn a_job_that_never_moves_stops_recording_its_uses_after_thousands_of_them() {
    let steps = [
        "malloc:a:2M",
        "malloc:b:2M",
        "repeat:6000:1",
        "memset:a:0:1",
        "sync",
    ];
    let run = client(Runtime::Fake13, &moving_beside("64MiB", &[]), &steps);
    run.assert_ok();
    let moves = run.moves();
    assert_eq!(moves["quiet_entered"], 1, "{moves:#}");
    // The 4,096th use found the tier quiet; the ones after it too.
    assert_eq!(moves["unrecorded_uses"], 6000 - 4095, "{moves:#}");
    assert_eq!(moves["drains_quiet"], 0, "{moves:#}");
    // Each recorded use recorded its block's event; none after.
    assert_eq!(event_records(&run), 4095);
}

#[test]
fn the_first_move_after_a_quiet_spell_waits_for_the_kernels_whose_uses_went_unrecorded() {
    // a and b fill the quota, their uses recorded until the tier goes
    // quiet. Then each gets a 20 ms kernel whose use is not, and c needs
    // room while they run. Moved out beside them (their last recorded uses
    // long finished), a or b would be unmapped under its kernel, and its
    // last bytes lost.
    let steps = [
        "malloc:a:2M",
        "malloc:b:2M",
        "fill:a:1:1",
        "fill:b:2:1",
        "repeat:4100:1",
        "memset:a:0:1",
        "fill:a:4:1",
        "fill:b:5:1",
        "malloc:c:2M",
        "fill:c:3:1",
        "copyout:c:1",
        "sync",
        "hostbytes",
        "peekvia:a:1",
        "peekvia:b:1",
    ];
    let vars = moving_beside("4MiB", &[("FAKE_CUDA_KERNEL_US", "20000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    let busy = busy_unmaps(&run);
    assert!(busy.is_empty(), "unmapped under a kernel: {busy:#?}");
    let moves = run.moves();
    assert_eq!(moves["quiet_entered"], 1, "{moves:#}");
    assert_eq!(moves["drains_quiet"], 1, "{moves:#}");
    assert_eq!(moves["drains_unread"], 0, "{moves:#}");
    // c was made on the device, by moving a block out, not in host memory.
    assert_eq!(placements(&run), ["device", "device", "device"]);
    let moved = tier_moves(&run);
    assert!(moved.iter().any(|(op, _)| op == "demote"), "{moved:?}");
    copied_bytes_hold(&run, "3");
    peeks_hold(&run, &[("a", "4"), ("b", "5")]);
}

#[test]
fn a_block_brought_in_for_its_use_ends_the_quiet_and_counts_one_drain() {
    // While quiet, c finds the quota held by allocations the tier does not
    // make, and goes to host memory; once they are freed its first use
    // brings it in, draining the device first.
    let steps = [
        "malloc:a:2M",
        "malloc:n1:1536K",
        "malloc:n2:1536K",
        "malloc:n3:1536K",
        "fill:a:1:1",
        "repeat:4100:1",
        "memset:a:0:1",
        "malloc:c:4M",
        "free:n1",
        "free:n2",
        "fill:c:3:1",
        "copyout:c:1",
        "sync",
        "hostbytes",
    ];
    let run = client(Runtime::Fake13, &moving_beside("8MiB", &[]), &steps);
    run.assert_ok();
    let c = hex(&run.field("malloc c", "ptr"));
    let moved = tier_moves(&run);
    assert!(moved.contains(&("promote".to_string(), c)), "{moved:?}");
    let moves = run.moves();
    assert_eq!(moves["quiet_entered"], 1, "{moves:#}");
    assert_eq!(moves["drains_quiet"], 1, "{moves:#}");
    assert_eq!(moves["drains_unread"], 0, "{moves:#}");
    assert_eq!(moves["drains"], 1, "{moves:#}");
    copied_bytes_hold(&run, "3");
}

#[test]
fn a_block_still_landing_when_the_tier_goes_quiet_is_read_with_its_bytes() {
    // y goes out for w and comes back for a copy on stream 2, over a link
    // of 1 MiB/s; the tier goes quiet while the copy in may still be under
    // way, and a kernel on stream 3 reads y unrecorded: only a wait for the
    // copies in before going quiet gives it y's bytes.
    let steps = [
        "malloc:y:2M",
        "fill:y:5:1",
        "sync",
        "malloc:z:2M",
        "malloc:w:2M",
        "free:w",
        "copyout:y:2",
        "repeat:8200:1",
        "kernel:rt:z:z:-",
        "peekvia:y:3",
        "sync",
    ];
    let vars = moving_beside("4MiB", &[("FAKE_CUDA_LINK_MIB_PER_S", "1")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    assert_eq!(run.moves()["quiet_entered"], 1, "{:#}", run.moves());
    peeks_hold(&run, &[("y", "5")]);
}

#[test]
fn a_block_in_host_memory_keeps_uses_recorded() {
    // c goes to host memory at once (the quota is full and a and b were
    // never used, so nothing may move beside the kernels for it): with a
    // block that could come, uses are recorded all along.
    let steps = [
        "malloc:a:4M",
        "malloc:b:4M",
        "malloc:c:4M",
        "repeat:4200:1",
        "memset:a:0:1",
        "sync",
    ];
    let run = client(Runtime::Fake13, &moving_beside("8MiB", &[]), &steps);
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let moves = run.moves();
    assert_eq!(moves["quiet_entered"], 0, "{moves:#}");
    assert_eq!(moves["unrecorded_uses"], 0, "{moves:#}");
    assert_eq!(event_records(&run), 4200);
}

#[test]
fn a_fault_while_quiet_says_the_blocks_named_were_not_recorded() {
    // Thousands of copies, then a kernel that fails as after a fault: the
    // message cannot list the launch's blocks, and says why.
    let steps = ["malloc:a:2M", "repeat:4100:1", "memset:a:0:1", "fill:a:1:1"];
    let env = moving_beside("64MiB", &[("FAKE_CUDA_FAULT_AFTER", "1")]);
    let run = client(Runtime::Fake13, &env, &steps);
    assert!(run.stdout.contains("fill a rc=700"), "{}", run.stdout);
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("as a kernel's fault does"))
        .collect();
    assert_eq!(said.len(), 1, "{}", run.stderr);
    assert!(
        said[0].contains("Blocks it named: not recorded"),
        "{}",
        said[0]
    );
}

#[test]
fn a_quota_cut_while_quiet_drains_once_and_ends_the_quiet() {
    // a, b and c fill a 16 MiB quota and the tier goes quiet; then the
    // quota is cut to 6 MiB while the job sleeps. The cut waits for the
    // device once (uses went unrecorded) and moves two blocks out; that
    // wait saw every launch before it finish, so the quiet ends there, and
    // bringing a block back for its read afterwards needs no second wait.
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let log = work.path().join("calls.log");
    let trace = work.path().join("trace-%p.json");
    let (log_text, trace_text) = (log.to_string_lossy(), trace.to_string_lossy());
    let mut env = moving_beside("16MiB", &[]);
    env.extend([
        ("FAKE_CUDA_LOG", &*log_text),
        ("VRAMSHARE_TRACE", &*trace_text),
    ]);
    // The three blocks made and filled with 1, 2, 3 (all fit here).
    let mut steps = THIRD_COMES_IN.to_vec();
    steps.extend([
        "repeat:4100:1",
        "memset:a:1:1",
        "sync",
        "sleep:1500",
        // Each copy's buffer is the client's until its stream is done.
        "copyout:a:1",
        "sync",
        "copyout:b:1",
        "sync",
        "copyout:c:1",
        "sync",
        "peekvia:a:1",
        "peekvia:b:1",
        "peekvia:c:1",
    ]);
    let mut child = client_command(&shm, &env, &steps).spawn().unwrap();
    let pid = child.id();
    // The quota is cut once the client has synchronized after its uses.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("sync rc=") {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            panic!("the client ended early: {seen}");
        }
        seen.push_str(&line);
    }
    let registry = open_existing_mut::<RegistryFile>(&shm)
        .ok()
        .and_then(|map| Registry::new(map).ok())
        .expect("the client's registry");
    let counters = &registry.live_slot(pid).unwrap().devices()[0];
    assert_eq!(counters.device_bytes.load(Acquire), 12 * MIB);
    // What `vramshare quota set` writes.
    counters.quota.store(6 * MIB, Release);
    let cut = Instant::now();
    while counters.device_bytes.load(Acquire) > 6 * MIB {
        assert!(
            cut.elapsed() < Duration::from_secs(1),
            "held to the new quota"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Room again for the reads to bring their blocks back.
    counters.quota.store(16 * MIB, Release);
    stdout.read_to_string(&mut seen).unwrap();
    let mut output = child.wait_with_output().unwrap();
    output.stdout = seen.into_bytes();
    let run = collect(output, work, &log);
    run.assert_ok();
    let moves = run.moves();
    assert_eq!(moves["quiet_entered"], 1, "{moves:#}");
    assert_eq!(moves["drains_quiet"], 1, "{moves:#}");
    assert_eq!(moves["drains"], 1, "{moves:#}");
    peeks_hold(&run, &[("a", "1"), ("b", "2"), ("c", "3")]);
}
