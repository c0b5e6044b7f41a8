//! Copies and memsets of rows (`cudaMemcpy2D…`, `cudaMemset2D…`), between
//! devices (`cudaMemcpyPeer…`), the driver's synchronous ones
//! (`cuMemcpyHtoD_v2`, `cuMemsetD8_v2`, …) and its per-thread stream forms
//! (`…_ptsz`, `…_ptds`), on the fake runtime: each is a
//! use of the blocks its operands start in, counted as a copy, and, with
//! the spill tier, work that waits at its gate and brings a block in host
//! memory onto the device first, as a launch does.

mod common;

use common::*;

/// The trace's coverage of `api`: (named, unnamed, undecoded, in library).
fn coverage(run: &Run, api: &str) -> [u64; 4] {
    let c = &run.trace()["processes"][0]["coverage"][api];
    ["named", "unnamed", "undecoded", "in_library"].map(|k| c[k].as_u64().unwrap_or(0))
}

/// Whether the tier's copy of the block at `block` onto the device came
/// before the first fake call logged as `call`.
fn came_in_before(run: &Run, block: u64, call: &str) -> bool {
    let position = |wanted: &str| {
        run.calls
            .iter()
            .position(|logged| logged.contains(wanted))
            .unwrap_or_else(|| panic!("no {wanted} in {:?}", run.calls))
    };
    position(&format!("cuMemcpyAsync dst={block:#x} ")) < position(call)
}

#[test]
fn a_copy_of_rows_into_a_block_in_host_memory_brings_it_onto_the_device_first() {
    let run = client(
        Runtime::Fake13,
        &moving("16MiB", &[]),
        &[
            "malloc:a:6M",
            "malloc:b:6M",
            // Over the quota: made in host memory.
            "malloc:c:6M",
            "copy2d:c:7:1",
            "memset2d:b:3",
            "copyout:c:1",
            "sync",
            "hostbytes",
        ],
    );
    run.assert_ok();
    assert_eq!((run.rc("copy2d"), run.rc("memset2d")), (0, 0));
    assert_eq!(placements(&run), ["device", "device", "host"]);
    let c = hex(&run.field("malloc c", "ptr"));
    // The copy of rows named c: c came in (room made by moving another
    // out), its bytes copied onto the device before the rows were given to
    // CUDA, and the rows landed on the device.
    assert!(
        tier_moves(&run).contains(&("promote".to_string(), c)),
        "{:?}",
        tier_moves(&run)
    );
    assert!(
        came_in_before(&run, c, "cudaMemcpy2DAsync "),
        "{:?}",
        run.calls
    );
    copied_bytes_hold(&run, "7");
    assert_eq!(coverage(&run, "cudaMemcpy2DAsync"), [1, 0, 0, 0]);
    assert_eq!(coverage(&run, "cudaMemset2D"), [1, 0, 0, 0]);
    let copies = &run.trace()["processes"][0]["copies"];
    assert_eq!(copies["cudaMemcpy2DAsync"], 1, "{copies}");
    assert_eq!(copies["cudaMemset2D"], 1, "{copies}");
}

#[test]
fn the_drivers_synchronous_copies_and_memsets_name_their_blocks() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:dst:1M",
            "malloc:set:1M",
            "hcopysync:dst",
            "dsetsync:set",
        ],
    );
    run.assert_ok();
    assert_eq!((run.rc("hcopysync"), run.rc("dsetsync")), (0, 0));
    assert_eq!(coverage(&run, "cuMemcpyHtoD_v2"), [1, 0, 0, 0]);
    assert_eq!(coverage(&run, "cuMemsetD8_v2"), [1, 0, 0, 0]);
}

#[test]
fn a_drivers_described_copy_names_the_block_at_its_device_end() {
    let run = driver_client(
        &moving("16MiB", &[]),
        &[
            "malloc:a:6M",
            "malloc:b:6M",
            // Over the quota: made in host memory.
            "malloc:c:6M",
            "copy2d:c:9",
            "peek:c",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("copy2d"), 0);
    let c = hex(&run.field("malloc c", "ptr"));
    // c came onto the device before the rows were copied into it.
    assert!(came_in_before(&run, c, "cuMemcpy2D_v2 "), "{:?}", run.calls);
    assert_eq!(log_field(run.line("peek c"), "byte"), "9");
    assert_eq!(coverage(&run, "cuMemcpy2D_v2"), [1, 0, 0, 0]);
}

#[test]
fn the_drivers_per_thread_stream_copies_are_hooked_called_or_looked_up() {
    // Over the quota, the block is made in host memory: each copy brings it
    // onto the device first.
    let run = driver_client(
        &moving("16MiB", &[]),
        &["malloc:a:6M", "malloc:b:6M", "malloc:c:6M", "perthread:c"],
    );
    run.assert_ok();
    assert_eq!(run.rc("perthread"), 0);
    each_named_c_which_came_in_first(
        &run,
        &[
            "cuMemcpyHtoDAsync_v2_ptsz",
            "cuMemsetD8Async_ptsz",
            "cuMemcpyHtoD_v2_ptds",
            "cuMemcpy2D_v2_ptds",
        ],
    );
}

/// Each of `apis` (the first called first) named block c once, and c,
/// made in host memory, came onto the device before the first of them.
fn each_named_c_which_came_in_first(run: &Run, apis: &[&str]) {
    for api in apis {
        assert_eq!(coverage(run, api), [1, 0, 0, 0], "{api}");
    }
    let c = hex(&run.field("malloc c", "ptr"));
    let first = format!("{} ", apis[0]);
    assert!(came_in_before(run, c, &first), "{:?}", run.calls);
}

#[test]
fn the_runtimes_per_thread_stream_copies_and_memsets_are_hooked() {
    let run = client(
        Runtime::Fake13,
        &moving("16MiB", &[]),
        &["malloc:a:6M", "malloc:b:6M", "malloc:c:6M", "ptds:c"],
    );
    run.assert_ok();
    assert_eq!(run.rc("ptds c"), 0);
    assert_eq!(placements(&run), ["device", "device", "host"]);
    each_named_c_which_came_in_first(
        &run,
        &[
            "cudaMemcpy_ptds",
            "cudaMemset_ptds",
            "cudaMemcpy2D_ptds",
            "cudaMemset2D_ptds",
        ],
    );
}
