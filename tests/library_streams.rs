//! A math library call carries its handle, not its stream. Where moves
//! overlap the job's kernels, the call's work must come after the work
//! that used its operands last: with the stream set on the handle known
//! (`cublasSetStream_v2`, `cudnnSetStream`), it is ordered there on the
//! device and the job's thread goes on; without it, the thread waits for
//! that work to finish. On the fake runtime, whose streams run their work
//! 20 ms after it is reached, as a GPU runs it later than it is given.

mod common;

use common::*;

fn overlapping(quota: &str) -> Vec<(&str, &str)> {
    moving_beside(quota, &[("FAKE_CUDA_STREAM_DELAY_US", "20000")])
}

/// Four 4 MiB blocks under 12 MiB (the tier holds them), a, b and c filled
/// and waited for; then A's fill on stream `fill_on`, still to run when the
/// product on stream 2 (C = A + B) is called.
fn product_after_a_fill_on(fill_on: &str) -> Run {
    let mut steps: Vec<String> = ["a", "b", "c", "e"]
        .iter()
        .map(|name| format!("malloc:{name}:4M"))
        .collect();
    steps.extend(["fill:a:1:1", "fill:b:2:1", "fill:c:9:1", "sync"].map(String::from));
    steps.push(format!("fill:a:5:{fill_on}"));
    steps.extend(["gemm:a:b:c:2048:2048:2", "sync", "peekvia:c:1"].map(String::from));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &overlapping("12MiB"), &steps);
    run.assert_ok();
    assert_eq!(run.rc("gemm"), 0);
    run
}

#[test]
fn a_product_on_a_handle_whose_stream_was_never_set_waits_on_the_thread() {
    // The handle runs on the default stream, which the shim did not see
    // set: the thread waits for A's fill (on stream 2) before the call.
    let mut steps: Vec<String> = ["a", "b", "c", "e"]
        .iter()
        .map(|name| format!("malloc:{name}:4M"))
        .collect();
    steps.extend(
        [
            "fill:a:1:1",
            "fill:b:2:1",
            "fill:c:9:1",
            "sync",
            "fill:a:5:2",
        ]
        .map(String::from),
    );
    steps.extend(["gemm:a:b:c:2048:2048:-", "sync", "peekvia:c:1"].map(String::from));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &overlapping("12MiB"), &steps);
    run.assert_ok();
    assert_eq!(run.rc("gemm"), 0);
    assert!(
        !run.calls_with(&["cudaEventSynchronize"]).is_empty(),
        "{:#?}",
        run.calls
    );
    assert_c_holds_the_product(&run);
}

#[test]
fn a_product_on_the_stream_that_used_its_operand_last_does_not_hold_the_thread() {
    let run = product_after_a_fill_on("2");
    // The stream orders the fill before the product: nothing waited for.
    let waits = run.calls_with(&["cudaEventSynchronize"]);
    assert!(waits.is_empty(), "{:#?}", run.calls);
    assert_c_holds_the_product(&run);
}

#[test]
fn a_product_after_work_on_another_stream_waits_for_it_on_the_device() {
    let run = product_after_a_fill_on("1");
    // The product's stream waits for the fill's event; the thread does not.
    let waits = run.calls_with(&["cudaEventSynchronize"]);
    assert!(waits.is_empty(), "{:#?}", run.calls);
    assert_c_holds_the_product(&run);
}

#[test]
fn a_product_whose_kernel_runs_on_another_stream_than_was_set_is_ordered_there() {
    // The handle's stream was seen set to 1, then changed to 2 unseen. A's
    // two fills on stream 1 still run (the second 40 ms on) when the
    // product is called: its kernel, on stream 2, must wait for them.
    let mut steps: Vec<String> = ["a", "b", "c", "e"]
        .iter()
        .map(|name| format!("malloc:{name}:4M"))
        .collect();
    steps.extend(["fill:a:1:1", "fill:b:2:1", "fill:c:9:1", "sync"].map(String::from));
    steps.extend(["gemm:a:b:c:2048:2048:1", "sync", "blasunseen:2"].map(String::from));
    steps.extend(["fill:a:3:1", "fill:a:5:1", "gemm:a:b:c:2048:2048:-"].map(String::from));
    steps.extend(["sync", "peekvia:c:1"].map(String::from));
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &overlapping("12MiB"), &steps);
    run.assert_ok();
    assert_eq!(run.rc("blasunseen"), 0);
    assert_c_holds_the_product(&run);
}

/// c, read back by a copy, holds the product's A + B made after A's last
/// fill (5 + 2 in every byte), not c's own 9 nor a sum with A's earlier
/// bytes.
fn assert_c_holds_the_product(run: &Run) {
    let c = run.line("peekvia c");
    assert_eq!(
        (log_field(c, "first"), log_field(c, "last")),
        ("7".into(), "7".into())
    );
}
