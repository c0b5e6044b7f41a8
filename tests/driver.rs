//! Programs that allocate through the CUDA driver API (`cuMemAlloc_v2` and
//! kin, linked directly against libcuda.so.1), on a fake driver that logs
//! every call: held to the same quota, spilled with the driver's own calls.

mod common;

use common::*;

fn driver_client(env: &[(&str, &str)], steps: &[&str]) -> Run {
    run_in(fake_dir(Runtime::Fake13), "driver_client", steps, env, true)
}

#[test]
fn driver_allocations_are_held_to_the_quota_and_spill_through_the_driver() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:a:32M",
            "malloc:b:16M",
            "touch:b",
            "meminfo",
            "free:a",
            "touch:b",
            "free:b",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("malloc b"), 0, "over quota, spilled");
    let b = run.field("malloc b", "ptr");
    let b_word = format!("ptr={}", b);
    assert_eq!(
        run.calls_with(&[
            "cuMemAllocManaged",
            &format!("size={}", 16 * MIB),
            "flags=1",
            "rc=0"
        ])
        .len(),
        1,
        "{:#?}",
        run.calls
    );
    assert_eq!(
        run.calls_with(&["cuMemAdvise_v2", &b_word, "advice=3", "loc=host", "rc=0"])
            .len(),
        1,
        "{:#?}",
        run.calls
    );
    assert_eq!(
        run.calls_with(&[
            "cuMemAdvise_v2",
            &b_word,
            "advice=5",
            "loc=device:0",
            "rc=0"
        ])
        .len(),
        1
    );
    assert_eq!(
        run.meminfo(),
        vec![(0, 32 * MIB)],
        "cuMemGetInfo_v2 reports the quota"
    );
    // Freeing a promotes b, through the driver, on the shim's own stream.
    assert_eq!(run.calls_with(&["cuStreamCreate", "flags=1"]).len(), 1);
    assert_eq!(
        run.calls_with(&[
            "cuMemAdvise_v2",
            &b_word,
            "advice=3",
            "loc=device:0",
            "rc=0"
        ])
        .len(),
        1
    );
    assert_eq!(
        run.calls_with(&[
            "cuMemPrefetchAsync_v2",
            &b_word,
            "loc=device:0",
            "stream=own",
            "rc=0"
        ])
        .len(),
        1
    );
    assert!(
        run.calls.iter().all(|c| !c.contains(" cuda")),
        "a driver-only program never reaches the runtime: {:#?}",
        run.calls
    );
    let promoted = run.events("promote");
    assert_eq!(
        (promoted.len(), promoted[0]["api"].as_str()),
        (1, Some("cuMemPrefetchAsync"))
    );
    let allocs = run.allocations();
    assert_eq!(
        allocs,
        [("cuMemAlloc_v2", "device"), ("cuMemAlloc_v2", "host")]
            .map(|(a, p)| (a.to_string(), p.to_string()))
    );
    let process = &run.trace()["processes"][0];
    assert_eq!(process["leaked"], serde_json::Value::Array(vec![]));
    assert_eq!(process["peak_device"]["0"], 32 * MIB);
}

#[test]
fn managed_blocks_freed_stream_ordered_go_to_cu_mem_free() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &["async:a:32M", "async:b:16M", "freeasync:b", "freeasync:a"],
    );
    run.assert_ok();
    let b = format!("ptr={}", run.field("async b", "ptr"));
    assert_eq!(run.rc("freeasync b"), 0);
    assert_eq!(
        run.calls_with(&["cuMemFree_v2", &b, "rc=0"]).len(),
        1,
        "{:#?}",
        run.calls
    );
    assert!(run.calls_with(&["cuMemFreeAsync", &b]).is_empty());
    assert_eq!(
        run.calls_with(&["cuMemFreeAsync", "rc=0"]).len(),
        1,
        "a, on the device, freed as asked"
    );
}

#[test]
fn the_callers_own_managed_memory_freed_stream_ordered_goes_to_cu_mem_free() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &["managed:m:1M", "freeasync:m"],
    );
    run.assert_ok();
    let m = format!("ptr={}", run.field("managed m", "ptr"));
    assert_eq!(run.rc("freeasync m"), 0);
    assert_eq!(
        run.calls_with(&["cuMemFree_v2", &m, "rc=0"]).len(),
        1,
        "{:#?}",
        run.calls
    );
}

#[test]
fn runtime_and_driver_allocations_share_one_quota() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &["rtmalloc:a:24M", "malloc:b:16M", "pool:c:8M", "meminfo"],
    );
    run.assert_ok();
    let placements = run.allocations();
    let expected = [
        ("cudaMalloc", "device"),
        ("cuMemAlloc_v2", "host"),
        ("cuMemAllocFromPoolAsync", "device"),
    ];
    assert_eq!(
        placements,
        expected.map(|(a, p)| (a.to_string(), p.to_string()))
    );
    assert_eq!(run.meminfo(), vec![(0, 32 * MIB)]);
}

#[test]
fn driver_spill_off_unknown_pointers_and_no_device() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB"), ("VRAMSHARE_SPILL", "off")],
        &["malloc:a:24M", "malloc:b:16M", "managed:c:16M"],
    );
    run.assert_ok();
    assert_eq!(run.rc("malloc b"), 2, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(
        run.rc("managed c"),
        0,
        "the caller's managed memory may live on the host"
    );
    assert_eq!(run.events("reject").len(), 1);

    let steps = ["free:nothing", "malloc:a:1M", "meminfo"];
    let bare = run_in(
        fake_dir(Runtime::Fake13),
        "driver_client",
        &steps,
        &[("FAKE_CUDA_NO_DEVICE", "1")],
        false,
    );
    let shimmed = driver_client(
        &[("FAKE_CUDA_NO_DEVICE", "1"), ("VRAMSHARE_QUOTA", "32MiB")],
        &steps,
    );
    assert_eq!(shimmed.stdout, bare.stdout, "errors pass through unchanged");
    assert!(
        shimmed.stdout.contains("malloc a rc=100"),
        "{}",
        shimmed.stdout
    );
}

#[test]
fn pitched_driver_allocations() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:a:30M",
            "pitch:p:1000:1024",
            "pitch:q:3000:4096",
            "touch:q",
            "free:q",
            "free:p",
        ],
    );
    run.assert_ok();
    assert_eq!(
        run.field("pitch p", "pitch"),
        "1024",
        "1M: fits on the device"
    );
    assert_eq!(
        run.field("pitch q", "pitch"),
        "3072",
        "12M: spilled, with the driver's row alignment"
    );
    let allocs = run.events("alloc");
    let placements: Vec<&str> = allocs
        .iter()
        .map(|e| e["placement"].as_str().unwrap())
        .collect();
    assert_eq!(placements, ["device", "device", "host"]);
    assert_eq!(allocs[2]["api"], "cuMemAllocPitch_v2");
}

#[test]
fn functions_fetched_by_name_are_the_hooks() {
    // Also when the lookup answers from a table of its own (as another
    // interposer in front of the driver would), not the exported addresses.
    for (how, private) in ["proc", "proc_v2", "entry", "entry_version"]
        .into_iter()
        .flat_map(|how| [(how, "0"), (how, "1")])
    {
        let fetch = format!("fetch:{how}");
        let steps = [
            fetch.as_str(),
            "fmalloc:a:32M",
            "fmalloc:b:16M",
            "fmeminfo",
            "ffree:b",
            "ffree:a",
        ];
        let run = driver_client(
            &[
                ("VRAMSHARE_QUOTA", "32MiB"),
                ("FAKE_CUDA_PRIVATE_LOOKUP", private),
            ],
            &steps,
        );
        run.assert_ok();
        assert_eq!(
            run.line(&format!("fetch {how}")),
            format!("fetch {how} ok=1")
        );
        let how = format!("{how} (private table: {private})");
        assert_eq!(
            run.meminfo(),
            vec![(0, 32 * MIB)],
            "{how}: the fetched cuMemGetInfo reports the quota"
        );
        let allocs: Vec<&str> = run
            .events("alloc")
            .iter()
            .map(|e| e["placement"].as_str().unwrap())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|p| if p == "host" { "host" } else { "device" })
            .collect();
        assert_eq!(
            allocs,
            ["device", "host"],
            "{how}: the fetched cuMemAlloc is held to the quota"
        );
        assert_eq!(
            run.events("free").len(),
            2,
            "{how}: and the fetched cuMemFree releases"
        );
        assert_eq!(run.calls_with(&["cuMemAllocManaged"]).len(), 1, "{how}");
    }
}

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
fn a_driver_pools_reserve_counts_until_it_is_trimmed() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "async:a:16M",
            "freeasync:a",
            "meminfo",
            "malloc:b:24M",
            "meminfo",
            "free:b",
        ],
    );
    run.assert_ok();
    // The pool keeps a's 16M; b (24M) fits only once the pool is trimmed,
    // through the driver's own cuMemPoolTrimTo.
    assert_eq!(run.meminfo(), [(16 * MIB, 32 * MIB), (8 * MIB, 32 * MIB)]);
    assert_eq!(run.calls_with(&["cuMemPoolTrimTo"]).len(), 1);
    assert_eq!(
        run.allocations()[1],
        ("cuMemAlloc_v2".to_string(), "device".to_string())
    );
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "async:a:16M",
            "freeasync:a",
            "async:b:24M",
            "meminfo",
            "freeasync:b",
        ],
    );
    run.assert_ok();
    assert_eq!(run.calls_with(&["cuMemPoolTrimTo"]).len(), 1);
    assert_eq!(run.meminfo(), [(8 * MIB, 32 * MIB)]);
    assert_eq!(
        run.allocations()[1],
        ("cuMemAllocAsync".to_string(), "device".to_string())
    );
}

#[test]
fn a_driver_only_program_never_gets_the_runtime_loaded() {
    let steps = [
        "malloc:a:32M",
        "malloc:b:16M",
        "fetch:proc_v2",
        "fmalloc:c:1M",
        "free:a",
        "ffree:c",
        "maps",
    ];
    // LD_LIBRARY_PATH lets a careless shim find the fake runtime by name.
    let dir = fake_dir(Runtime::Fake13);
    let run = run_in(
        dir,
        "driver_only_client",
        &steps,
        &[
            ("VRAMSHARE_QUOTA", "32MiB"),
            ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
        ],
        true,
    );
    run.assert_ok();
    assert_eq!(run.line("maps"), "maps runtime_loaded=0");
    assert_eq!(
        run.events("promote").len(),
        2,
        "b and c promoted through the driver"
    );
    let process = &run.trace()["processes"][0];
    assert!(
        process["runtime"]
            .as_str()
            .unwrap()
            .ends_with("libcuda.so.1"),
        "{process}"
    );
}

#[test]
fn dlsym_hands_back_the_hooks_and_answers_as_glibc_otherwise() {
    dlsym_as("dlsym_client");
}

#[test]
fn dlsym_of_programs_built_against_glibc_before_2_34_too() {
    let dir = fake_dir(Runtime::Fake13);
    let symbols = std::process::Command::new("objdump")
        .arg("-T")
        .arg(dir.join("dlsym_client_old_glibc"))
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
    if let Ok(symbols) = symbols {
        assert!(
            symbols.contains("GLIBC_2.2.5") && symbols.contains(" dlsym"),
            "the client calls dlsym@GLIBC_2.2.5: {symbols}"
        );
    }
    dlsym_as("dlsym_client_old_glibc");
}

/// The dlsym checks, with `client` (one of the dlsym clients).
fn dlsym_as(client: &str) {
    let dir = fake_dir(Runtime::Fake13);
    let steps = [
        "default",
        "next",
        "lookup:libcuda.so.1:cuMemAlloc_v2",
        "lookup:libcudart.so.13:cudaMalloc",
        "lookup:libcuda.so.1:cuInit",
        "lookup:libcuda.so.1:cuMemAlloc",
        "lookup:libc.so.6:getpid",
        "alloc:a:24",
        "alloc:b:16",
    ];
    let path = [
        ("VRAMSHARE_QUOTA", "32MiB"),
        ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
    ];
    let run = run_in(dir, client, &steps, &path, true);
    run.assert_ok();
    assert_eq!(
        run.line("default"),
        "default same=1",
        "RTLD_DEFAULT as glibc"
    );
    assert_eq!(
        run.line("next"),
        "next ok=1 wrapped=1",
        "RTLD_NEXT relative to its caller: the interposer finds libc's getpid"
    );
    assert_eq!(
        run.field("lookup cuMemAlloc_v2", "owner"),
        "libvramshare.so",
        "a driver hook"
    );
    assert_eq!(
        run.field("lookup cudaMalloc", "owner"),
        "libvramshare.so",
        "a runtime hook"
    );
    assert_eq!(
        run.field("lookup cuInit", "owner"),
        "libcuda.so.1",
        "not hooked: the driver's own"
    );
    assert_eq!(
        run.field("lookup cuMemAlloc", "owner"),
        "none",
        "not in the fake: still not found"
    );
    assert_eq!(run.field("lookup getpid", "owner"), "libc.so.6");
    assert_eq!((run.rc("alloc a"), run.rc("alloc b")), (0, 0));
    let placements: Vec<String> = run
        .allocations()
        .into_iter()
        .map(|(_, placement)| placement)
        .collect();
    assert_eq!(
        placements,
        ["device", "host"],
        "allocations through a dlsym'd pointer are held to the quota"
    );

    // Without the shim, the same lookups find the libraries' own functions.
    let bare = run_in(dir, client, &steps[..4], &path, false);
    assert_eq!(bare.field("lookup cuMemAlloc_v2", "owner"), "libcuda.so.1");
    assert_eq!(bare.line("next"), "next ok=1 wrapped=1");
}
