//! Room taken in stream order, on the fake runtime's cost model: a block
//! coming in where no room is free takes the device memory of a kept block
//! of its size whose free is queued but not reached, its copy queued on the
//! device behind that free, instead of a live block moving out or the
//! job's thread waiting for the free.

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
/// come next. Then every block's first and last bytes.
fn lent_steps() -> Vec<&'static str> {
    vec![
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
        "peekvia:c:2",
        "peekvia:b:2",
        "sync",
        "meminfo",
    ]
}

#[test]
fn a_block_coming_in_takes_the_memory_of_a_kept_block_whose_free_is_queued() {
    let run = client(Runtime::Fake13, &timed("8MiB"), &lent_steps());
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let c = hex(&run.field("async c", "ptr"));
    // c came in; nothing went out to make its room.
    assert_eq!(tier_moves(&run), [("promote".to_string(), c)]);
    let moves = &run.trace()["processes"][0]["moves"];
    assert_eq!(moves["lent_bytes_to_device"].as_u64(), Some(4 * MIB), "{moves:#}");
    // The job's thread did not wait for a's free.
    assert_eq!(moves["free_wait_seconds"].as_f64(), Some(0.0), "{moves:#}");
    // c's memory is a's: device memory was made for a and b only.
    let on_device = run
        .calls_with(&["cuMemCreate"])
        .into_iter()
        .filter(|call| log_field(call, "location") == "device")
        .count();
    assert_eq!(on_device, 2, "{:#?}", run.calls);
    // a's range no longer maps it: b and c hold the quota, no more.
    assert_eq!(run.meminfo(), vec![(0, 8 * MIB)], "{}", run.stdout);
}

#[test]
fn a_block_in_lent_memory_holds_its_own_bytes_once_the_lenders_kernels_have_run() {
    // a's three fills run for 60 ms after c's copy could have landed (10 ms):
    // had the copy not waited for a's free, they would write a's byte into
    // c's memory after c's own fill.
    let run = client(Runtime::Fake13, &timed("8MiB"), &lent_steps());
    run.assert_ok();
    for (name, byte) in [("c", "3"), ("b", "2")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(log_field(line, "first"), byte, "{line}");
        assert_eq!(log_field(line, "last"), byte, "{line}");
    }
}
