//! Host memory in the spill tier, on the fake runtime: the pinned host
//! memory a block no longer needs is kept for the next block of its size
//! that needs host memory (pinning new memory runs at a few GB/s), as many
//! of each size as the tier's blocks of that size ever had on the host at
//! once, and of all sizes together at most twice the most they had there
//! at once.

mod common;

use common::*;

#[test]
fn host_memory_of_a_freed_block_serves_the_next_block_of_its_size_without_pinning_more() {
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "malloc:a:4M",
            "malloc:b:4M",
            // No room: c and then d are made in host memory.
            "malloc:c:4M",
            "free:c",
            "malloc:d:4M",
            "fill:d:4:0",
            "peekvia:d:0",
        ],
    );
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host", "host"]);
    let host_made = host_memory_made(&run).len();
    // c's, and a's at its first move out (to make room for d at its fill):
    // d got c's.
    assert_eq!(host_made, 2, "{:?}", run.calls);
    let moves = run.moves();
    assert_eq!(moves["pinned_bytes"], 8 * MIB, "{moves}");
    // Neither was pinned beside unused host memory: c's went to d.
    assert_eq!(moves["pinned_beside_unused_bytes"], 0, "{moves}");
    let line = run.line("peekvia d");
    assert_eq!(log_field(line, "first"), "4", "{line}");
}

#[test]
fn a_block_that_needs_host_memory_takes_that_of_a_kept_block_of_its_size_only() {
    // c is made in host memory and kept; d, half its size, cannot take
    // c's host memory (a handle maps whole, as the driver has it, and the
    // fake refuses a smaller mapping too): d is made with host memory of
    // its own size, and a block of c's size going out takes c's.
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "async:a:4M",
            "async:b:4M",
            // No room: c is made in host memory, then kept.
            "async:c:4M",
            "freeasync:c",
            "sync",
            "async:d:2M",
            "fill:d:6:0",
            "copyout:d:0",
            "sync",
            "hostbytes",
        ],
    );
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host", "host"]);
    // c's host memory, and d's of its own size; a, going out to make
    // room for d at its fill, took c's.
    let host_made = host_memory_made(&run);
    assert_eq!(host_made.len(), 2, "{host_made:?}");
    assert!(host_made[0].contains("size=4194304"), "{host_made:?}");
    assert!(host_made[1].contains("size=2097152"), "{host_made:?}");
    // d's was pinned while c's 4 MiB lay unused, kept: the trace says so.
    let moves = run.moves();
    assert_eq!(moves["pinned_beside_unused_bytes"], 2 * MIB, "{moves}");
    let refused: Vec<_> = run
        .calls_with(&["cuMemMap"])
        .into_iter()
        .filter(|c| log_field(c, "rc") != "0")
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    copied_bytes_hold(&run, "6");
}

#[test]
fn host_memory_is_kept_by_size_so_blocks_of_each_size_pin_theirs_once() {
    // Two blocks of 4 MiB, then four of 2 MiB, made in host memory and
    // freed, three times over: each size's host memory is pinned once.
    // Kept under one bound for all sizes (the most bytes on the host at
    // once, 8 MiB), the 2 MiB blocks' memory was released as they were
    // freed, the 4 MiB spares holding the bound, and pinned again at each
    // round: 32 MiB pinned in all, 24 given back.
    let mut steps = vec!["malloc:a:4M", "malloc:b:4M", "repeat:3:12"];
    steps.extend([
        "malloc:c:4M",
        "malloc:d:4M",
        "free:c",
        "free:d",
        "malloc:e:2M",
        "malloc:f:2M",
        "malloc:g:2M",
        "malloc:h:2M",
        "free:e",
        "free:f",
        "free:g",
        "free:h",
    ]);
    // A block in host memory that a kernel then names: a move, so that
    // the trace has its moves (a takes a spare's host memory going out).
    steps.extend(["malloc:z:4M", "fill:z:1:0"]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let moves = run.moves();
    assert_eq!(moves["pinned_bytes"], 16 * MIB, "{moves}");
    assert_eq!(moves["unpinned_bytes"], 0, "{moves}");
    assert_eq!(moves["pinned_beside_unused_bytes"], 8 * MIB, "{moves}");
}

#[test]
fn frees_ask_cuda_about_kept_blocks_only_where_some_may_go() {
    // Sixteen 2 MiB blocks in host memory, freed and kept, then sixty-four
    // blocks of that size taken and freed again: no size is over its bound
    // at those frees, so none needs to know whether a kept block's free was
    // reached. Asking of every kept block at every free cost a language
    // model's step more than its moves did.
    let names: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let mut steps: Vec<String> = vec!["malloc:a:4M".into(), "malloc:b:4M".into()];
    steps.extend(names.iter().map(|n| format!("async:{n}:2M")));
    steps.extend(names.iter().map(|n| format!("freeasync:{n}")));
    steps.extend([
        "repeat:64:2".into(),
        "async:x:2M".into(),
        "freeasync:x".into(),
    ]);
    // A block a kernel then names: a move, so that the trace has its moves
    // and the calls the shim made.
    steps.extend(["malloc:z:4M".into(), "fill:z:1:0".into()]);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let queries = run.host_calls(None, |name| name.contains("EventQuery"));
    assert!(queries < 80, "{queries} event queries for 80 frees");
}

#[test]
fn host_memory_kept_unused_stays_within_twice_the_most_the_blocks_had_on_the_host() {
    // Sixteen blocks of sixteen sizes, 2 to 32 MiB, each made in host
    // memory and freed in turn, as a job whose shapes change from step to
    // step: each size's most on the host at once is one block, but they
    // were never there together. Kept by size alone, all 272 MiB would lie
    // unused, pinned; the most the blocks had on the host at once is 32 MiB.
    let mut steps: Vec<String> = vec!["async:a:32M".into(), "async:b:32M".into()];
    for i in 1..=16 {
        steps.push(format!("async:x{i}:{}M", 2 * i));
        steps.push(format!("freeasync:x{i}"));
    }
    // Kept blocks go once their frees are reached: after the device has
    // caught up, the next free looks again.
    steps.extend(["sync".into(), "async:y:2M".into(), "freeasync:y".into()]);
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &moving("64MiB", &[]), &steps);
    run.assert_ok();
    // Host memory made and not released by the end (a and b stay live,
    // so nothing is released for the job's having freed all it had).
    let released: Vec<String> = run
        .calls_with(&["cuMemRelease"])
        .into_iter()
        .map(|c| log_field(c, "handle"))
        .collect();
    let held: u64 = host_memory_made(&run)
        .iter()
        .filter(|c| !released.contains(&log_field(c, "handle")))
        .map(|c| log_field(c, "size").parse::<u64>().unwrap())
        .sum();
    assert!(held <= 64 * MIB, "{} MiB of host memory held", held / MIB);
    assert!(held >= 32 * MIB, "{} MiB of host memory held", held / MIB);
}
