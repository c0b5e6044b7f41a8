//! Copies out of the device beside the job's kernels (`VRAMSHARE_MOVES=
//! overlap`), on the fake runtime: a block that goes out is copied in
//! pieces of at most 4 MiB, each waited for before the next is queued, so
//! that a remap beside them never waits for a long copy; and its bytes,
//! every piece of them, are where they were when it comes back.

mod common;

use common::*;

const PIECE: u64 = 4 * MIB;

#[test]
fn a_block_goes_out_in_pieces_one_at_a_time_and_comes_back_whole() {
    // Two 12 MiB blocks fill 24 MiB of a 32 MiB quota, each with one byte
    // in its first 8 MiB and another in its last 4 (its third piece). c
    // (12 MiB) finds no room: a block goes out for it. Then, once any move
    // the mover thread was handed has landed, the kernels read a and b
    // through pointers the shim does not see (`overlap` may move a block
    // beside such a kernel: the README says what `overlap` trusts).
    let steps = [
        "malloc:a:12M",
        "malloc:b:12M",
        "fill:a:1:1",
        "fill:a+8388608:2:1",
        "fill:b:3:1",
        "fill:b+8388608:4:1",
        "sync",
        "malloc:c:12M",
        "fill:c:5:1",
        "sync",
        "sleep:300",
        "peekvia:a:1",
        "peekvia:b:1",
        "peekvia:c:1",
    ];
    // Copies land only when their stream is waited for: a piece queued
    // before the last one was waited for would still be held back.
    let vars = moving_beside("32MiB", &[("FAKE_CUDA_DEFER_COPIES", "1")]);
    let run = client(Runtime::Fake13, &vars, &steps);
    run.assert_ok();
    for (name, first, last) in [("a", "1", "2"), ("b", "3", "4"), ("c", "5", "5")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(
            (log_field(line, "first"), log_field(line, "last")),
            (first.to_string(), last.to_string()),
            "{line}"
        );
    }
    let mut went_out = 0;
    for name in ["a", "b"] {
        let at = hex(&run.field(&format!("malloc {name}"), "ptr"));
        let size = 12 * MIB;
        // The block's copies out, in the order made, and what the fake
        // driver was asked in between: the block's bytes copied to its
        // staging half, where its host memory is mapped.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        let mut waited_between = true;
        for call in &run.calls {
            // Each call is logged as "pid=N NAME key=value ...".
            let words: Vec<&str> = call.split_whitespace().skip(1).collect();
            if words.first() == Some(&"cuStreamSynchronize") {
                waited_between = true;
                continue;
            }
            if words.first() != Some(&"cuMemcpyAsync") {
                continue;
            }
            let field = |key: &str| {
                let value = words.iter().find_map(|w| w.strip_prefix(key)).unwrap();
                u64::from_str_radix(value.trim_start_matches("0x"), 16).ok()
            };
            let (dst, src) = (field("dst=").unwrap(), field("src=").unwrap());
            let bytes: u64 = words
                .iter()
                .find_map(|w| w.strip_prefix("size="))
                .unwrap()
                .parse()
                .unwrap();
            if (at..at + size).contains(&src) && dst == src + size {
                assert!(
                    waited_between,
                    "a piece of {name} queued before the one before it was waited for: {:#?}",
                    run.calls
                );
                pieces.push((src - at, bytes));
                waited_between = false;
            }
        }
        if pieces.is_empty() {
            continue;
        }
        went_out += 1;
        assert_eq!(
            pieces,
            [(0, PIECE), (PIECE, PIECE), (2 * PIECE, PIECE)],
            "{name}'s copies out"
        );
    }
    assert!(went_out >= 1, "a block went out for c: {:#?}", run.calls);
    let peak = run.trace()["processes"][0]["peak_device"]["0"].as_u64();
    assert!(peak.unwrap() <= 32 * MIB, "{peak:?}");
}
