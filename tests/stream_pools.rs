//! CUDA's stream-ordered pools (`cudaMallocAsync` and its kin) under a
//! quota, on the fake runtime: what a pool keeps counts, and the chunk a
//! pool grows by never takes the device past its quota.

mod common;

use common::*;

#[test]
fn what_a_stream_ordered_pool_keeps_counts_until_it_is_trimmed() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "64MiB")],
        &[
            "async:a:10M",
            "freeasync:a",
            "meminfo",
            "async:b:20M",
            "meminfo",
            "freeasync:b",
            "malloc:c:40M",
            "meminfo",
            "async:d:8M",
            "meminfo",
            "free:c",
            "freeasync:d",
        ],
    );
    run.assert_ok();
    let free: Vec<u64> = run.meminfo().iter().map(|(f, _)| f / MIB).collect();
    // The pool keeps a's 10M after its free; b reuses them and grows the
    // pool to 20M; c (40M) fits next to the 20M b left in the pool; d does
    // not fit until the pool is trimmed, and then lands on the device.
    assert_eq!(free, [54, 44, 4, 16]);
    assert_eq!(run.calls_with(&["cudaMemPoolTrimTo"]).len(), 1);
    let placements: Vec<String> = run.allocations().into_iter().map(|(_, p)| p).collect();
    assert_eq!(placements, ["device"; 4]);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["peak_device"]["0"], 60 * MIB);
}

/// That the device never held more than `mib` MiB at once (the trace's
/// high-water mark of its count).
fn assert_device_held_at_most(run: &Run, mib: u64) {
    let peak = run.trace()["processes"][0]["peak_device"]["0"]
        .as_u64()
        .unwrap();
    assert!(
        peak <= mib * MIB,
        "{} MiB held at most: {}",
        peak as f64 / MIB as f64,
        run.stderr
    );
}

/// Where each allocation of `size` bytes was made, in order.
fn placements_of_size(run: &Run, size: u64) -> Vec<String> {
    run.events("alloc")
        .iter()
        .filter(|e| e["size"] == size)
        .map(|e| e["placement"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_small_allocation_growing_cudas_pool_finds_room_for_the_chunk_first() {
    // 30 MiB of tier blocks and 1 MiB of `cudaMalloc` under 32 MiB, 14 MiB
    // of the tier's freed in stream order and kept on the device; then 4
    // KiB from CUDA's own pool (too small for a tier block). It fits by its
    // size, but the pool grows by a whole 2 MiB chunk, which no trim gives
    // back while the 4 KiB live in it: the kept block gives its room for
    // the chunk before CUDA is asked, and the device never holds more than
    // its quota.
    let run = client(
        Runtime::Fake13,
        &moving_beside("32MiB", &[]),
        &[
            "async:a:16M",
            "async:b:14M",
            "malloc:c:1M",
            "freeasync:b",
            "sync",
            "async:t:4K",
            "meminfo",
            "freeasync:t",
            "freeasync:a",
            "free:c",
        ],
    );
    run.assert_ok();
    assert_device_held_at_most(&run, 32);
    // The chunk counts: 16 + 1 + 2 MiB held, 13 free.
    let free: Vec<u64> = run.meminfo().iter().map(|(f, _)| f / MIB).collect();
    assert_eq!(free, [13]);
    let placements: Vec<String> = run.allocations().into_iter().map(|(_, p)| p).collect();
    assert_eq!(placements, ["device"; 4]);
}

#[test]
fn a_pool_allocation_whose_growth_finds_no_room_goes_to_host_memory() {
    // 30 MiB of tier blocks, all live, and 1 MiB of `cudaMalloc` under 32
    // MiB, with moves made only once the device has drained (the default):
    // no block may move out beside the kernels to make room for the chunk
    // CUDA's empty pool must add for 4 KiB, and no kept block can give it.
    // The 4 KiB are made in host memory instead, and the device never
    // holds more than its quota.
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB"), ("FAKE_CUDA_DEVICES", "1")],
        &[
            "async:a:16M",
            "async:b:14M",
            "malloc:c:1M",
            "async:t:4K",
            "freeasync:t",
            "freeasync:b",
            "freeasync:a",
            "free:c",
        ],
    );
    run.assert_ok();
    assert_device_held_at_most(&run, 32);
    assert_eq!(placements_of_size(&run, 4096), ["host"]);
}

#[test]
fn room_for_cudas_pool_to_grow_is_made_when_no_kept_block_can_give_it() {
    // As where a kept block gives its room for the chunk, but the kept
    // block's free waits behind 200 ms of work on its stream, so it cannot
    // give its room yet: a tier block moves to
    // host memory to make room for the chunk instead, and the device never
    // holds more than its quota.
    let run = client(
        Runtime::Fake13,
        &moving_beside(
            "32MiB",
            &[("FAKE_CUDA_KERNEL_US", "200000"), ("VRAMSHARE_LOG", "warn")],
        ),
        &[
            "async:a:16M",
            "async:b:14M",
            "malloc:c:1M",
            "use:a",
            "sync",
            "use:b:1",
            "freeasync:b:1",
            "async:t:4K",
            "freeasync:t",
            "freeasync:a",
            "free:c",
        ],
    );
    run.assert_ok();
    assert_device_held_at_most(&run, 32);
    // Room was made by moving a block out, not by sending the 4 KiB to
    // host memory.
    let placements: Vec<String> = run.allocations().into_iter().map(|(_, p)| p).collect();
    assert_eq!(placements, ["device"; 4]);
    assert!(!run.events("demote").is_empty(), "no block moved out");
    assert!(!run.stderr.contains("over its quota"), "{}", run.stderr);
}

#[test]
fn room_held_for_a_pools_growth_goes_to_an_allocation_that_needs_it() {
    // 26 MiB of live tier blocks and a kept one of 2 MiB under 32 MiB; 4
    // KiB from CUDA's pool (which grows by a chunk), 1 MiB of `cudaMalloc`,
    // 4 KiB more, near the quota, for which room for a growth is held; then
    // 1.5 MiB of `cudaMalloc`, which fits only in that room: it takes it,
    // on the device, rather than going to host memory beside room held for
    // a growth that has not come.
    let mut ops: Vec<String> = (0..13).map(|i| format!("async:b{i}:2M")).collect();
    ops.extend(
        [
            "async:k:2M",
            "freeasync:k",
            "sync",
            "async:s1:4K",
            "malloc:m:1M",
            "async:s2:4K",
            "malloc:d:1536K",
            "meminfo",
        ]
        .map(String::from),
    );
    let ops: Vec<&str> = ops.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &moving_beside("32MiB", &[]), &ops);
    run.assert_ok();
    assert_device_held_at_most(&run, 32);
    let of_d: Vec<String> = run
        .events("alloc")
        .iter()
        .filter(|e| e["size"] == 1536 * 1024)
        .map(|e| e["placement"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(of_d, ["device"]);
}

#[test]
fn a_small_allocation_goes_to_host_memory_when_its_pool_may_grow_beside_unused_reserve() {
    // 29 MiB of `cudaMalloc` and 1 MiB from CUDA's pool (which grows by a
    // 2 MiB chunk for it) under 32 MiB, with moves made only once the
    // device has drained: no room for another chunk can be made. Then 4
    // KiB from the pool, whose unused reserve (1 MiB) would hold them; but
    // its reserve lies in pieces (FAKE_CUDA_POOL_PIECES), as CUDA's may, so
    // the pool grows by a chunk all the same, which no trim gives back
    // while the 4 KiB live in it. The 4 KiB go to host memory, and the
    // device never holds more than its quota.
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "32MiB"),
            ("FAKE_CUDA_DEVICES", "1"),
            ("FAKE_CUDA_POOL_PIECES", "1"),
        ],
        &[
            "malloc:c:29M",
            "async:p:1M",
            "async:t:4K",
            "freeasync:t",
            "freeasync:p",
            "free:c",
        ],
    );
    run.assert_ok();
    assert_device_held_at_most(&run, 32);
    assert_eq!(placements_of_size(&run, 4096), ["host"]);
}

#[test]
fn a_large_pool_allocation_whose_growth_finds_no_room_goes_to_host_memory() {
    // Moves off, 60 MiB, a pool that grows by 32 MiB chunks (as CUDA's was
    // seen to): 20 MiB grow it to 32, a growth of 12 past the allocation.
    // Then 24 MiB fit under the quota at their size (32 + 24), but the pool
    // would grow by a chunk to 64 MiB and nothing can make room for it: the
    // 24 MiB go to host memory, and the device never holds more than its
    // quota.
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "60MiB"),
            ("VRAMSHARE_MOVES", "off"),
            ("FAKE_CUDA_DEVICES", "1"),
            ("FAKE_CUDA_POOL_CHUNK_MIB", "32"),
        ],
        &["async:a:20M", "async:b:24M", "freeasync:b", "freeasync:a"],
    );
    run.assert_ok();
    assert_device_held_at_most(&run, 60);
    assert_eq!(placements_of_size(&run, 24 * MIB), ["host"]);
}
