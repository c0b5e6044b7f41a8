//! Room taken in stream order, on the fake runtime's cost model: a block
//! coming in where no room is free takes the device memory of a kept block
//! of its size whose free is queued but not reached, its copy queued on the
//! device behind that free, instead of a live block moving out or the
//! job's thread waiting for the free. The kept block's range maps that
//! memory until its free is reached, and never after the memory goes.

mod common;

use common::*;

/// Moves beside the kernels, each kernel 20 ms, copies over a 400 MiB/s
/// link (a 4 MiB block: 10 ms), so that frees are queued long before they
/// are reached.
fn timed(quota: &str) -> Vec<(&str, &str)> {
    moving_beside(
        quota,
        &[
            ("FAKE_CUDA_KERNEL_US", "20000"),
            ("FAKE_CUDA_LINK_MIB_PER_S", "400"),
        ],
    )
}

/// a and b fill the quota, c is made in host memory; a's kernels (60 ms
/// of them, on stream 1) are queued before its free, and c's (on stream 2)
/// come next: c comes into a's memory. Then `more`.
fn lent_run(more: &[&'static str]) -> Run {
    let mut steps = vec![
        "async:a:4M:1",
        "async:b:4M:1",
        // No room, and no block whose uses are known could make any.
        "async:c:4M:2",
        "fill:b:2:1",
        "fill:a:1:1",
        "fill:a:1:1",
        "fill:a:1:1",
        "freeasync:a:1",
        "fill:c:3:2",
    ];
    steps.extend_from_slice(more);
    let run = client(Runtime::Fake13, &timed("8MiB"), &steps);
    run.assert_ok();
    run
}

/// Whether the fake driver's log line `call` is of `function`.
fn named(call: &str, function: &str) -> bool {
    call.split_whitespace().any(|word| word == function)
}

/// The calls' positions in the fake driver's log that unmap the range at
/// `at`, with whether a queued or running kernel pointed into it.
fn unmaps_at(run: &Run, at: u64) -> Vec<(usize, bool)> {
    run.calls
        .iter()
        .enumerate()
        .filter(|(_, c)| named(c, "cuMemUnmap") && hex(&log_field(c, "ptr")) == at)
        .map(|(i, c)| (i, log_field(c, "busy") != "0"))
        .collect()
}

#[test]
fn a_block_coming_in_takes_the_memory_of_a_kept_block_whose_free_is_queued_and_holds_its_own_bytes()
{
    let run = lent_run(&["peekvia:c:2", "peekvia:b:2", "sync"]);
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let c = hex(&run.field("async c", "ptr"));
    // c came in; nothing went out to make its room.
    assert_eq!(tier_moves(&run), [("promote".to_string(), c)]);
    let moves = run.moves();
    assert_eq!(
        moves["lent_bytes_to_device"].as_u64(),
        Some(4 * MIB),
        "{moves:#}"
    );
    // The job's thread did not wait for a's free.
    assert_eq!(moves["free_wait_seconds"].as_f64(), Some(0.0), "{moves:#}");
    // c's memory is a's: device memory was made for a and b only.
    let on_device = run
        .calls_with(&["cuMemCreate"])
        .into_iter()
        .filter(|call| log_field(call, "location") == "device")
        .count();
    assert_eq!(on_device, 2, "{:#?}", run.calls);
    // a's three fills run for 60 ms after c's copy could have landed (10
    // ms): had the copy not waited for a's free, they would have written
    // a's byte into c's memory after c's own fill.
    peeks_hold(&run, &[("c", "3"), ("b", "2")]);
}

#[test]
fn the_lenders_range_is_unmapped_once_its_free_is_reached() {
    // After the sync, a's free is reached; the next launch's look at the
    // tier unmaps a's range, with no kernel pointing into it.
    let run = lent_run(&["sync", "peekvia:b:2"]);
    let a = hex(&run.field("async a", "ptr"));
    let unmaps = unmaps_at(&run, a);
    assert_eq!(unmaps.len(), 1, "{:#?}", run.calls);
    assert!(!unmaps[0].1, "unmapped under a kernel: {:#?}", run.calls);
}

#[test]
fn the_lenders_range_is_unmapped_before_the_memory_it_lent_is_released() {
    // c is freed at once: its memory (a's) goes, and a's range, which
    // still maps it, is unmapped first, so that no mapping outlives the
    // bytes counted.
    let run = lent_run(&["free:c", "meminfo"]);
    let a = hex(&run.field("async a", "ptr"));
    let handle = run
        .calls_with(&["cuMemCreate"])
        .into_iter()
        .find(|call| log_field(call, "location") == "device")
        .map(|call| log_field(call, "handle"))
        .expect("a's device memory");
    let released = run
        .calls
        .iter()
        .position(|c| named(c, "cuMemRelease") && log_field(c, "handle") == handle)
        .unwrap_or_else(|| panic!("a's memory not released: {:#?}", run.calls));
    let unmaps = unmaps_at(&run, a);
    assert_eq!(unmaps.len(), 1, "{:#?}", run.calls);
    assert!(unmaps[0].0 < released, "{:#?}", run.calls);
    assert!(!unmaps[0].1, "unmapped under a kernel: {:#?}", run.calls);
    // b alone is left on the device.
    assert_eq!(run.meminfo(), vec![(4 * MIB, 8 * MIB)], "{}", run.stdout);
}
