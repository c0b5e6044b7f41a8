//! Blocks that served one use a trip, read in place (moves beside the
//! kernels, on the fake runtime): a block that went out having served one
//! use is read where it is by work that reads each byte about once (a
//! copy, a product with a thin side), and still brought in by a product
//! whose sides are both wide; one that served more comes in as before.

mod common;

use common::*;

/// a, b and c of 4 MiB under 8 MiB, used in turn twice over (a `a_uses`
/// times a turn, b and c twice), so that each use of a block in host
/// memory sends out the one named longest ago: a goes out at c's first
/// turn (its first trip, begun on the device, says nothing of its uses),
/// comes in again at its second, and goes out again at c's second, having
/// served `a_uses` uses that trip. Then `steps` run, with the stream's work
/// 20 ms late.
fn after_a_goes_out(a_uses: usize, steps: &[&str]) -> Run {
    let mut all = vec!["malloc:a:4M", "malloc:b:4M", "malloc:c:4M"];
    for _ in 0..2 {
        all.extend(std::iter::repeat_n("fill:a:1:1", a_uses));
        all.extend(["fill:b:2:1", "fill:b:2:1", "fill:c:3:1", "fill:c:3:1"]);
    }
    all.push("sync");
    all.extend_from_slice(steps);
    let vars = moving_beside("8MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "20000")]);
    let run = client(Runtime::Fake13, &vars, &all);
    run.assert_ok();
    run
}

/// The tier's moves of the block at `ptr`, in order ("promote", "demote").
fn moves_of(run: &Run, ptr: u64) -> Vec<String> {
    tier_moves(run)
        .into_iter()
        .filter(|(_, at)| *at == ptr)
        .map(|(op, _)| op)
        .collect()
}

/// a came in again for the work after its second trip, where the copy out
/// read its bytes, and no use was read in place as one of a block read once.
fn came_back_in_with_its_bytes(run: &Run) {
    let a = hex(&run.field("malloc a", "ptr"));
    assert_eq!(moves_of(run, a), ["demote", "promote", "demote", "promote"]);
    assert_eq!(log_field(run.line("hostbytes"), "first"), "1");
    assert_eq!(run.moves()["read_once_in_place"], 0);
}

#[test]
fn a_block_that_served_one_use_is_read_in_place_by_a_copy_and_a_thin_product() {
    // The copy and the product fall in two steps the job marks: a block
    // read in place twice in one step comes in (the next test).
    let run = after_a_goes_out(
        1,
        &[
            "copyout:a:1",
            "sync",
            "hostbytes",
            "step",
            "gemm:a:a:c:4096:16:1",
            "peekvia:c:1",
        ],
    );
    let a = hex(&run.field("malloc a", "ptr"));
    assert_eq!(
        moves_of(&run, a),
        ["demote", "promote", "demote"],
        "a did not come back in after its second trip"
    );
    // The copy read a's bytes where they are.
    copied_bytes_hold(&run, "1");
    // The product read a where it is: c's first 64 KiB are a's first byte
    // twice over, the rest c's own.
    assert_eq!(run.rc("gemm"), 0);
    let line = run.line("peekvia c");
    assert_eq!(
        (log_field(line, "first"), log_field(line, "last")),
        ("2".into(), "3".into())
    );
    let moves = run.moves();
    assert_eq!(moves["read_once_in_place"], 2, "{moves:#}");
}

#[test]
fn a_block_read_in_place_twice_in_one_step_comes_in_at_the_second() {
    // A kernel writes a in place, 20 ms later than it is queued; the copy
    // that follows at once brings a in, which must wait for that kernel:
    // never unmapped under it, and the copy reads what it wrote.
    let run = after_a_goes_out(1, &["fill:a:5:1", "copyout:a:1", "sync", "hostbytes"]);
    let a = hex(&run.field("malloc a", "ptr"));
    assert_eq!(
        moves_of(&run, a),
        ["demote", "promote", "demote", "promote"]
    );
    let busy = busy_unmaps(&run);
    assert!(busy.is_empty(), "unmapped under a kernel: {busy:#?}");
    copied_bytes_hold(&run, "5");
    assert_eq!(run.moves()["read_once_in_place"], 1);
}

#[test]
fn a_block_that_served_one_use_comes_in_for_a_wide_product_and_stays_for_the_next_copy() {
    // The product names a and b only (it writes b), so that both fit.
    let run = after_a_goes_out(
        1,
        &["gemm:a:b:b:2048:2048:1", "copyout:a:1", "sync", "hostbytes"],
    );
    came_back_in_with_its_bytes(&run);
}

#[test]
fn a_block_that_served_two_uses_comes_in_for_a_copy() {
    let run = after_a_goes_out(2, &["copyout:a:1", "sync", "hostbytes"]);
    came_back_in_with_its_bytes(&run);
}

#[test]
fn a_product_counts_while_no_block_is_in_host_memory() {
    // a comes in by a move, sending b out; b is freed, so that nothing is
    // in host memory when a wide product reads a. d then sends a out: a
    // served two uses (the fill, and the product), so the copy brings it in.
    let steps = [
        "malloc:a:4M",
        "malloc:b:4M",
        "malloc:c:4M",
        "fill:a:1:1",
        "fill:b:2:1",
        "fill:b:2:1",
        "fill:c:3:1",
        "fill:c:3:1",
        "fill:a:1:1",
        "sync",
        "free:b",
        "gemm:a:c:c:2048:2048:1",
        "fill:c:3:1",
        "malloc:d:4M",
        "fill:d:4:1",
        "fill:d:4:1",
        "copyout:a:1",
        "sync",
        "hostbytes",
    ];
    let vars = moving_beside("8MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "20000")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    came_back_in_with_its_bytes(&run);
}
