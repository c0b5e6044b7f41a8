//! Stream-ordered allocations in the spill tier, on the fake runtime: each
//! is a tier block of its own, and a free in stream order keeps the block
//! (its range, memory and mappings) for the next allocation of its size, on
//! the same stream at once and on another once the free is reached. Kept
//! blocks on the device count against the quota until given back, which
//! happens before anything would go to host memory or move out for room.

mod common;

use common::*;

fn ptr(run: &Run, step: &str) -> u64 {
    hex(&run.field(step, "ptr"))
}

#[test]
fn a_block_freed_in_stream_order_serves_the_next_allocation_of_its_size_and_counts_meanwhile() {
    let run = client(
        Runtime::Fake13,
        &moving("16MiB", &[]),
        &[
            "async:a:4M",
            "meminfo",
            "freeasync:a",
            "meminfo",
            "async:b:4M",
            "fill:b:9:0",
            "copyout:b:0",
            "sync",
            "hostbytes",
            "freeasync:b",
        ],
    );
    run.assert_ok();
    assert_eq!(
        ptr(&run, "async a"),
        ptr(&run, "async b"),
        "the same block again"
    );
    // One block for both: the second allocation made no memory.
    assert_eq!(run.calls_with(&["cuMemCreate"]).len(), 1, "{:?}", run.calls);
    // Kept, the block's device memory still counts, as a pool's would.
    let free: Vec<u64> = run.meminfo().iter().map(|(free, _)| *free).collect();
    assert_eq!(free, [12 * MIB, 12 * MIB], "{}", run.stdout);
    let line = run.line("hostbytes");
    assert_eq!(log_field(line, "first"), "9", "{line}");
    // The job freed both: nothing is left over at exit.
    assert!(leaked_blocks(run.trace()).is_empty(), "{:?}", run.trace());
    let allocs = run.allocations();
    assert_eq!(
        allocs,
        [
            ("cudaMallocAsync".to_string(), "device".to_string()),
            ("cudaMallocAsync".to_string(), "device".to_string())
        ]
    );
}

#[test]
fn another_stream_gets_a_kept_block_at_once_waiting_for_its_free() {
    let run = client(
        Runtime::Fake13,
        // Work on the streams runs 50 ms after it is given: stream 1 has
        // not reached the free when stream 2 allocates.
        &moving("64MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "50000")]),
        &[
            "async:a:4M:1",
            "fill:a:5:1",
            "freeasync:a:1",
            "async:b:4M:2",
            "fill:b:9:2",
            "copyout:b:2",
            "sync",
            "hostbytes",
        ],
    );
    run.assert_ok();
    assert_eq!(ptr(&run, "async b"), ptr(&run, "async a"), "the same block");
    let line = run.line("hostbytes");
    assert_eq!(log_field(line, "first"), "9", "{line}");
}

#[test]
fn a_block_freed_while_a_stream_is_captured_stays_and_is_never_reused() {
    let run = client(
        Runtime::Fake13,
        &moving("64MiB", &[]),
        &[
            "async:a:4M",
            "capture",
            "freeasync:a",
            "endcapture",
            "async:b:4M",
        ],
    );
    run.assert_ok();
    assert_ne!(
        ptr(&run, "async b"),
        ptr(&run, "async a"),
        "a is the graph's"
    );
    // Nothing waited for the device or gave memory back during the capture.
    let calls: Vec<&String> = run
        .calls
        .iter()
        .skip_while(|c| !c.contains("cudaStreamBeginCapture"))
        .take_while(|c| !c.contains("cudaStreamEndCapture"))
        .filter(|c| {
            c.contains("Synchronize") || c.contains("cuMemUnmap") || c.contains("cuMemRelease")
        })
        .collect();
    assert!(calls.is_empty(), "{calls:?}");
}

/// One round of a job that captures again and again: a block made, freed
/// in stream order while stream 1 is captured, and the graph instantiated
/// (by the `instantiate` step given) and launched there; `between` comes
/// after the launch, before both the executable graph and the graph are
/// destroyed.
fn capture_round<'a>(instantiate: &'a str, between: &[&'a str]) -> Vec<&'a str> {
    let mut round = vec![
        "async:a:4M:1",
        "capture:1",
        "freeasync:a:1",
        "endcapture:1",
        instantiate,
        "replay:1",
    ];
    round.extend(between);
    round.extend(["destroy", "graphdestroy"]);
    round
}

#[test]
fn blocks_freed_while_captured_are_given_back_once_their_graphs_are_gone() {
    const ROUNDS: usize = 4;
    let round = capture_round("instantiate", &["sync"]);
    let repeat = format!("repeat:{ROUNDS}:{}", round.len());
    let mut steps = vec![repeat.as_str()];
    steps.extend(&round);
    steps.push("meminfo");
    for env in [moving("64MiB", &[]), moving_beside("64MiB", &[])] {
        let run = client(Runtime::Fake13, &env, &steps);
        run.assert_ok();
        for step in [
            "capture",
            "endcapture",
            "instantiate",
            "replay",
            "graphdestroy",
        ] {
            assert_eq!(run.rc(step), 0, "{step}");
        }
        // Each round's block is given back once its graph and executable
        // graph are destroyed: none is held at the end, whatever the rounds.
        let free: Vec<u64> = run.meminfo().iter().map(|(free, _)| *free).collect();
        assert_eq!(free, [64 * MIB], "{env:?}: {}", run.stdout);
        assert_eq!(
            run.calls_with(&["cuMemRelease"]).len(),
            ROUNDS,
            "{env:?}: {:?}",
            run.calls
        );
    }
}

#[test]
fn a_block_freed_while_captured_stays_while_its_graphs_launch_may_run() {
    // The executable graph made with flags, or with parameters.
    for instantiate in ["instantiate", "instantiate:params"] {
        let steps = [
            "async:a:4M:1",
            "capture:1",
            "freeasync:a:1",
            "endcapture:1",
            instantiate,
            // Work on the streams runs 200 ms after it is given: the
            // capture's end is reached, the launch is not when both graphs
            // are destroyed.
            "sync",
            "replay:1",
            "destroy",
            "graphdestroy",
            "meminfo",
            "sync",
            "launch:rt",
            "meminfo",
        ];
        let run = client(
            Runtime::Fake13,
            &moving("64MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "200000")]),
            &steps,
        );
        run.assert_ok();
        assert_eq!(run.rc("instantiate"), 0, "{instantiate}");
        // Held until the launch was reached; given back at the next launch.
        let free: Vec<u64> = run.meminfo().iter().map(|(free, _)| *free).collect();
        assert_eq!(free, [60 * MIB, 64 * MIB], "{instantiate}: {}", run.stdout);
    }
}

#[test]
fn kept_blocks_give_their_room_back_before_an_allocation_would_go_to_host_memory() {
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "async:a:4M",
            "async:b:4M",
            "freeasync:a",
            "freeasync:b",
            "meminfo",
            "async:c:2M",
            "meminfo",
        ],
    );
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "device"]);
    let free: Vec<u64> = run.meminfo().iter().map(|(free, _)| *free).collect();
    // Both kept blocks held the quota; the oldest gave its room back.
    assert_eq!(free, [0, 2 * MIB], "{}", run.stdout);
    assert!(
        run.trace()["processes"][0]["peak_device"]["0"]
            .as_u64()
            .unwrap()
            <= 8 * MIB,
        "the process's peak"
    );
}

#[test]
fn a_move_in_takes_the_room_of_a_kept_block_before_moving_a_live_one_out() {
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "async:a:4M",
            "async:b:4M",
            "fill:a:1:0",
            "fill:b:2:0",
            // No room: c is made in host memory.
            "async:c:4M",
            "freeasync:a",
            // c comes onto the device in a's room; b stays. (The launches'
            // index of blocks, rebuilt at most every 100 µs, has not seen c
            // yet: the kernel finds c by the ledger.)
            "fill:c:3:0",
            "peekvia:c:0",
            "peekvia:b:0",
        ],
    );
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let c = ptr(&run, "async c");
    let moves = tier_moves(&run);
    assert_eq!(moves, [("promote".to_string(), c)], "nothing moved out");
    for (name, byte) in [("c", "3"), ("b", "2")] {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(log_field(line, "first"), byte, "{line}");
    }
}

#[test]
fn kept_blocks_give_their_room_to_any_allocation() {
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[]),
        &[
            "async:a:4M",
            "async:b:4M",
            "freeasync:a",
            "freeasync:b",
            "sync",
            // Smaller than a tier block: would spill if the kept blocks
            // kept their room.
            "malloc:c:1M",
        ],
    );
    run.assert_ok();
    let allocations = run.allocations();
    assert_eq!(
        allocations.last(),
        Some(&("cudaMalloc".to_string(), "device".to_string())),
        "{allocations:?}"
    );
}

#[test]
fn through_the_driver_kept_blocks_give_their_room_to_physical_memory_the_job_makes() {
    let run = driver_client(
        &moving("8MiB", &[]),
        &[
            "async:a:4M",
            "async:b:4M",
            "freeasync:a",
            "freeasync:b",
            "async:c:4M",
            "create:h:4M",
        ],
    );
    run.assert_ok();
    assert_eq!(
        ptr(&run, "async c"),
        ptr(&run, "async b"),
        "the latest freed"
    );
    let allocations = run.allocations();
    assert_eq!(
        allocations,
        [
            ("cuMemAllocAsync".to_string(), "device".to_string()),
            ("cuMemAllocAsync".to_string(), "device".to_string()),
            ("cuMemAllocAsync".to_string(), "device".to_string()),
            ("cuMemCreate".to_string(), "device".to_string()),
        ]
    );
}

/// The default pool's statistics as the client printed them, in order:
/// (reserved, reserved high, used, used high).
fn pool_stats(run: &Run) -> Vec<[u64; 4]> {
    run.stdout
        .lines()
        .filter(|line| line.starts_with("poolstats "))
        .map(|line| {
            assert_eq!(log_field(line, "rc"), "0", "{line}");
            ["reserved", "reserved_high", "used", "used_high"]
                .map(|key| log_field(line, key).parse().unwrap())
        })
        .collect()
}

#[test]
fn the_default_pool_counts_the_tier_blocks_that_serve_its_allocations_as_pytorch_reads_them() {
    // What PyTorch's cudaMallocAsync backend shows as memory_allocated,
    // memory_reserved and their peaks comes from these attributes.
    let run = client(
        Runtime::Fake13,
        &moving("64MiB", &[]),
        &[
            // Small: the pool's own (it reserves 2 MiB for it).
            "async:small:64K",
            "async:a:8M",
            "async:b:8M",
            "poolstats",
            // Kept on the device: no longer used, still reserved.
            "freeasync:b",
            "poolstats",
            "poolreset",
            "poolstats",
        ],
    );
    run.assert_ok();
    let small = 64 * 1024;
    assert_eq!(
        pool_stats(&run),
        [
            [
                2 * MIB + 16 * MIB,
                2 * MIB + 16 * MIB,
                small + 16 * MIB,
                small + 16 * MIB
            ],
            [
                2 * MIB + 16 * MIB,
                2 * MIB + 16 * MIB,
                small + 8 * MIB,
                small + 16 * MIB
            ],
            // The marks reset to what is held now.
            [
                2 * MIB + 16 * MIB,
                2 * MIB + 16 * MIB,
                small + 8 * MIB,
                small + 8 * MIB
            ],
        ],
        "{}",
        run.stdout
    );
}

#[test]
fn a_pool_peak_is_never_below_what_is_held_now() {
    let run = client(
        Runtime::Fake13,
        &moving("64MiB", &[]),
        &[
            "async:a:8M",
            "async:b:8M",
            // b kept, then c made beside it: more reserved, no new live high.
            "freeasync:b",
            "async:c:4M",
            "poolstats",
            // The pool's own allocations grow what is used.
            "async:s1:1M",
            "async:s2:1M",
            "async:s3:1M",
            "poolstats",
        ],
    );
    run.assert_ok();
    let stats = pool_stats(&run);
    assert_eq!(stats.len(), 2, "{}", run.stdout);
    for [reserved, reserved_high, used, used_high] in stats {
        assert!(reserved_high >= reserved, "{}", run.stdout);
        assert!(used_high >= used, "{}", run.stdout);
    }
    // The reserve holds a, b (kept) and c.
    assert_eq!(pool_stats(&run)[0][0], 20 * MIB, "{}", run.stdout);
}

#[test]
fn frees_in_stream_order_reuse_their_events() {
    let run = client(
        Runtime::Fake13,
        &moving("64MiB", &[]),
        &["repeat:50:2", "async:a:4M", "freeasync:a"],
    );
    run.assert_ok();
    // One block, kept and given again 50 times: its free's event is made
    // once, and recorded again at each free.
    assert_eq!(
        run.calls_with(&["cudaEventCreateWithFlags"]).len(),
        1,
        "{:?}",
        run.calls
    );
}

#[test]
fn the_drivers_pool_attributes_count_the_tier_blocks_too() {
    let run = driver_client(
        &moving("64MiB", &[]),
        &["async:a:8M", "async:b:4M", "free:b", "poolstats"],
    );
    run.assert_ok();
    let line = run.line("poolstats");
    assert_eq!(log_field(line, "rc"), "0", "{line}");
    assert_eq!(log_field(line, "used"), (8 * MIB).to_string(), "{line}");
    assert_eq!(
        log_field(line, "used_high"),
        (12 * MIB).to_string(),
        "{line}"
    );
}

/// The steps that leave `a`, a 4 MiB block with host memory (it moved out
/// once and back), kept on the device and then given back for `d`'s room,
/// under a quota of 8 MiB.
const A_GIVEN_BACK: [&str; 9] = [
    "async:a:4M",
    "async:b:4M",
    "fill:a:1:0",
    "fill:b:2:0",
    // No room: c is made in host memory; at its fill a moves out, then
    // back for its own fill, as b moves out.
    "async:c:4M",
    "fill:c:3:0",
    "fill:a:4:0",
    "freeasync:a",
    // No room beside c and the kept a: a gives its device memory back.
    "async:d:2M",
];

/// The maps of host memory at the block at `at`.
fn host_maps_at(run: &Run, at: u64) -> usize {
    let host_handles: Vec<String> = host_memory_made(run)
        .iter()
        .map(|c| log_field(c, "handle"))
        .collect();
    run.calls_with(&["cuMemMap"])
        .iter()
        .filter(|c| hex(&log_field(c, "ptr")) == at)
        .filter(|c| host_handles.iter().any(|h| *h == log_field(c, "handle")))
        .count()
}

#[test]
fn a_kept_block_gives_its_device_memory_back_without_mapping_host_memory_and_takes_new_where_there_is_room(
) {
    let mut steps = A_GIVEN_BACK.to_vec();
    steps.extend(["sync", "free:d", "async:e:4M", "fill:e:5:0", "peekvia:e:0"]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let a = ptr(&run, "async a");
    assert_eq!(ptr(&run, "async e"), a, "a's block again");
    let placements = placements(&run);
    assert_eq!(placements.last().map(String::as_str), Some("device"));
    // a's host memory was mapped at the block once, as it moved out; not
    // when its device memory went back, nor when it was handed out again.
    assert_eq!(host_maps_at(&run, a), 1, "{:#?}", run.calls);
    let line = run.line("peekvia e");
    assert_eq!(log_field(line, "first"), "5", "{line}");
}

#[test]
fn a_kept_block_given_back_is_handed_out_in_its_host_memory_where_there_is_no_room() {
    let mut steps = A_GIVEN_BACK.to_vec();
    // A kernel reads e through a pointer the shim does not see, in place:
    // its range maps memory; then e comes in for the memset.
    steps.extend([
        "sync",
        "async:e:4M",
        "peekvia:e:0",
        "memset:e:5:0",
        "copyout:e:0",
        "sync",
        "hostbytes",
    ]);
    let run = client(Runtime::Fake13, &moving("8MiB", &[]), &steps);
    run.assert_ok();
    let a = ptr(&run, "async a");
    assert_eq!(ptr(&run, "async e"), a, "a's block again");
    let placements = placements(&run);
    assert_eq!(placements.last().map(String::as_str), Some("host"));
    // Mapped at the block as it moved out, then as it was handed out.
    assert_eq!(host_maps_at(&run, a), 2, "{:#?}", run.calls);
    assert!(run.line("peekvia e").contains("rc=0"), "{}", run.stdout);
    let line = run.line("hostbytes");
    assert_eq!(log_field(line, "first"), "5", "{line}");
}

#[test]
fn an_allocation_waiting_for_a_kept_blocks_free_counts_the_wait() {
    // Work on the stream runs 10 ms after it is given, so the frees of a
    // and b are not reached when c asks for their room: c waits for the
    // older one's (under the 20 ms an allocation waits at most), and the
    // trace counts the wait.
    let run = client(
        Runtime::Fake13,
        &moving("8MiB", &[("FAKE_CUDA_STREAM_DELAY_US", "10000")]),
        &[
            "async:a:4M",
            "async:b:4M",
            "freeasync:a",
            "freeasync:b",
            "async:c:2M",
        ],
    );
    run.assert_ok();
    assert_eq!(placements(&run), ["device", "device", "device"]);
    let moves = run.moves();
    let waited = moves["free_wait_seconds"].as_f64().unwrap();
    assert!(waited > 0.001, "{moves:#}");
    // Bounded: an allocation waits for a free at most 20 ms.
    assert!(waited < 0.1, "{moves:#}");
}

#[test]
fn kept_blocks_given_back_for_room_kept_free_ahead_of_need_are_counted_apart() {
    // a and two blocks to be kept fill a 16 MiB quota; h, made after them,
    // is made in host memory. Once k1 and k2 are kept, h's fill brings it
    // in: the first kept block is given back for it (room needed now), the
    // second for the move budget kept free (2 MiB, ahead of need).
    let run = client(
        Runtime::Fake13,
        &moving("16MiB", &[]),
        &[
            "async:a:8M",
            "async:k1:4M",
            "async:k2:4M",
            "fill:a:1:0",
            "fill:k1:2:0",
            "fill:k2:3:0",
            "async:h:4M",
            "freeasync:k1",
            "freeasync:k2",
            "sync",
            "fill:h:4:0",
            "sync",
            "meminfo",
        ],
    );
    run.assert_ok();
    assert_eq!(run.meminfo(), vec![(4 * MIB, 16 * MIB)], "{}", run.stdout);
    let samples = run.moves()["samples"].as_array().unwrap();
    let last = samples.last().unwrap();
    let (all, ahead) = (
        last["give_back_ns"].as_u64().unwrap(),
        last["give_back_ahead_ns"].as_u64().unwrap(),
    );
    assert!(ahead > 0 && ahead < all, "{last:#}");
}
