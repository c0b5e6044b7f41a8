//! Physical memory of the CUDA driver's virtual memory API (`cuMemCreate`,
//! `cuMemMap`, `cuMemRelease` and kin), on the fake driver: counted from
//! create to the release or last unmap that frees it, made in host memory
//! when over the quota, or refused.

mod common;

use common::*;

/// Physical memory through the virtual memory API, under a 32 MiB quota: a
/// (24M) fits, b (16M) does not; the caller's own host memory h is not the
/// device's; after a's release b fits.
const VMM_STEPS: [&str; 10] = [
    "create:a:24M",
    "create:b:16M",
    "create:h:64M:host",
    "meminfo",
    "malloc:m:4M",
    "release:a",
    "create:c:16M",
    "meminfo",
    "release:c",
    "release:h",
];

#[test]
fn physical_memory_released_while_mapped_counts_until_unmapped() {
    // NVIDIA's own pattern: map, then release the handle at once; the
    // driver frees the memory at the last unmap, and the count ends there.
    // Then PyTorch's order: unmap, then release.
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB"), ("VRAMSHARE_SPILL", "off")],
        &[
            "create:a:24M",
            "reserve:va:24M",
            "map:va:a",
            "release:a",
            "create:b:16M",
            "unmap:va:24M",
            "create:c:16M",
            "reserve:vc:16M",
            "map:vc:c",
            "unmap:vc:16M",
            "create:d:24M",
            "release:c",
            "create:e:24M",
        ],
    );
    run.assert_ok();
    assert_eq!(
        (run.rc("map va"), run.rc("release a")),
        (0, 0),
        "the driver took both"
    );
    assert_eq!(run.rc("create b"), 2, "a is mapped: it still counts");
    assert_eq!(run.rc("create c"), 0, "a's last unmap freed it");
    assert_eq!(
        run.rc("create d"),
        2,
        "c unmapped but not released: it counts"
    );
    assert_eq!(run.rc("create e"), 0, "c released");
    let frees: Vec<(String, u64)> = run
        .events("free")
        .iter()
        .map(|e| {
            (
                e["api"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap() / MIB,
            )
        })
        .collect();
    assert_eq!(
        frees,
        [
            ("cuMemUnmap".to_string(), 24),
            ("cuMemRelease".to_string(), 16)
        ],
        "each freed once, by the call that freed it"
    );
}

/// The fake driver's log lines for creates of `size`, as (location, rc).
fn creates_of(run: &Run, size: u64) -> Vec<(String, String)> {
    run.calls_with(&["cuMemCreate", &format!("size={size}")])
        .iter()
        .map(|c| (log_field(c, "location"), log_field(c, "rc")))
        .collect()
}

#[test]
fn physical_memory_of_the_virtual_memory_api_counts_from_create_to_release() {
    for spill in ["host", "off"] {
        let run = driver_client(
            &[("VRAMSHARE_QUOTA", "32MiB"), ("VRAMSHARE_SPILL", spill)],
            &VMM_STEPS,
        );
        run.assert_ok();
        assert_eq!(
            run.rc("create h"),
            0,
            "host-located memory is not the device's"
        );
        assert_eq!(run.rc("create c"), 0, "room after a's release");
        let host_allocs = run
            .events("alloc")
            .into_iter()
            .filter(|e| e["placement"] == "host")
            .map(|e| e["size"].as_u64().unwrap())
            .collect::<Vec<_>>();
        let rejects = run
            .events("reject")
            .into_iter()
            .map(|e| e["size"].as_u64().unwrap())
            .collect::<Vec<_>>();
        if spill == "off" {
            assert_eq!(
                run.rc("create b"),
                2,
                "CUDA_ERROR_OUT_OF_MEMORY over the quota"
            );
            assert_eq!((rejects, host_allocs), (vec![16 * MIB], vec![]));
            assert_eq!(
                creates_of(&run, 16 * MIB),
                [("device".to_string(), "0".to_string())],
                "the refused create never reached the driver; c did"
            );
        } else {
            assert_eq!(run.rc("create b"), 0, "made on the host instead");
            assert_eq!((rejects, host_allocs), (vec![], vec![16 * MIB]));
            assert_eq!(
                creates_of(&run, 16 * MIB),
                [
                    ("host_numa".to_string(), "0".to_string()),
                    ("device".to_string(), "0".to_string())
                ],
                "b in the device's nearest host node, then c on the device"
            );
            assert!(
                run.calls_with(&["cuMemCreate", "location=host_numa", "id=1"])
                    .len()
                    == 1
            );
            let process = &run.trace()["processes"][0];
            assert_eq!(process["peak_spilled"]["0"], 16 * MIB);
        }
        assert_eq!(
            run.meminfo(),
            vec![(8 * MIB, 32 * MIB), (12 * MIB, 32 * MIB)],
            "spill {spill}: a, then m (4M, device) and c"
        );
        let process = &run.trace()["processes"][0];
        let leaked: Vec<&str> = process["leaked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["api"].as_str().unwrap())
            .collect();
        let expected: &[&str] = if spill == "host" {
            &["cuMemCreate", "cuMemAlloc_v2"]
        } else {
            &["cuMemAlloc_v2"]
        };
        let mut leaked_sorted = leaked.clone();
        leaked_sorted.sort();
        let mut expected_sorted = expected.to_vec();
        expected_sorted.sort();
        assert_eq!(
            leaked_sorted, expected_sorted,
            "spill {spill}: b (never released) and m"
        );
        assert_eq!(
            process["device_in_use"]["0"],
            4 * MIB,
            "spill {spill}: only m is left on the device"
        );
    }
}

#[test]
fn host_memory_made_for_an_rdma_request_drops_the_flag() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "create:a:24M",
            "create:b:16M:rdma",
            "release:b",
            "release:a",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("create b"), 0);
    let tries: Vec<(String, String)> = run
        .calls_with(&["cuMemCreate", &format!("size={}", 16 * MIB)])
        .iter()
        .map(|c| (log_field(c, "rdma"), log_field(c, "rc")))
        .collect();
    assert_eq!(
        tries,
        [
            ("1".to_string(), "1".to_string()),
            ("0".to_string(), "0".to_string())
        ],
        "refused with the RDMA flag, made without it"
    );
    assert_eq!(run.events("alloc")[1]["placement"], "host");
}

#[test]
fn a_driver_without_host_physical_memory_answers_out_of_memory() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB"), ("FAKE_CUDA_NO_HOST_VMM", "1")],
        &VMM_STEPS,
    );
    run.assert_ok();
    assert_eq!(run.rc("create b"), 2, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(
        creates_of(&run, 16 * MIB),
        [
            ("host_numa".to_string(), "1".to_string()),
            ("host_numa".to_string(), "1".to_string()),
            ("host".to_string(), "1".to_string()),
            ("device".to_string(), "0".to_string())
        ],
        "the three host forms tried, then c on the device"
    );
    let rejects = run.events("reject");
    assert_eq!(rejects.len(), 1);
    assert_eq!(rejects[0]["rc"], 2);
}

#[test]
fn a_mapping_reads_its_physical_memory_and_a_remapped_range_reads_the_new_one() {
    // What moving a block at a fixed address rests on, on the fake driver
    // as on a GPU: the bytes live in the physical memory, not the address.
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "create:dev:2M",
            "create:host:2M:host",
            "reserve:va:2M",
            "map:va:dev",
            "poke:va:7",
            "reserve:vb:2M",
            "map:vb:dev",
            "peek:vb",
            "unmap:va:2M",
            "map:va:host",
            "peek:va",
            "poke:va:9",
            "unmap:va:2M",
            "map:va:dev",
            "peek:va",
        ],
    );
    run.assert_ok();
    let peeks: Vec<String> = run
        .stdout
        .lines()
        .filter(|line| line.starts_with("peek"))
        .map(|line| log_field(line, "byte"))
        .collect();
    assert_eq!(
        peeks,
        ["7", "0", "7"],
        "an alias sees the write; another handle its own bytes; the first kept its own"
    );
}
