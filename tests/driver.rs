//! Programs that allocate through the CUDA driver API (`cuMemAlloc_v2` and
//! kin, linked directly against libcuda.so.1), on a fake driver that logs
//! every call: held to the same quota, spilled with the driver's own calls.

mod common;

use common::*;

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
