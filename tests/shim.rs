//! The shim as users run it: C programs calling the CUDA runtime through the
//! PLT, with `LD_PRELOAD=libvramshare.so`, on a fake runtime that logs every
//! call it receives. Each test reads back what the program saw, what the
//! runtime was asked, and the trace the shim wrote at exit.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn under_quota_allocations_stay_on_the_device() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "64MiB")],
        &[
            "malloc:a:16M",
            "malloc:b:16M",
            "touch:a",
            "free:a",
            "free:b",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("malloc a"), 0);
    assert_eq!(run.rc("malloc b"), 0);
    assert_eq!(run.calls_with(&["cudaMalloc"]).len(), 2);
    assert!(
        run.calls_with(&["cudaMallocManaged"]).is_empty(),
        "{:#?}",
        run.calls
    );
    let trace = run.trace();
    assert_eq!(trace["schema"], "vramshare-trace/1");
    let process = &trace["processes"][0];
    assert_eq!(process["quota"]["0"], 64 * MIB);
    assert_eq!(process["peak_device"]["0"], 32 * MIB);
    assert_eq!(process["peak_spilled"]["0"], 0);
    assert_eq!(process["leaked"], Value::Array(vec![]));
    let allocs = run.events("alloc");
    assert_eq!(allocs.len(), 2);
    assert!(allocs
        .iter()
        .all(|e| e["placement"] == "device" && e["api"] == "cudaMalloc" && e["size"] == 16 * MIB));
    assert_eq!(
        allocs[0]["ptr"].as_str().map(hex),
        Some(hex(&run.field("malloc a", "ptr")))
    );
    assert_eq!(run.events("free").len(), 2);
}

#[test]
fn mem_get_info_reports_the_quota() {
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "64MiB"),
            ("FAKE_CUDA_CAPACITY", "1073741824"),
        ],
        &[
            "meminfo",
            "malloc:a:16M",
            "meminfo",
            "malloc:b:60M",
            "meminfo",
        ],
    );
    run.assert_ok();
    let lines = run.meminfo();
    assert_eq!(lines[0], (64 * MIB, 64 * MIB));
    assert_eq!(lines[1], (48 * MIB, 64 * MIB));
    // b spilled; its first 32M are on the device, and a quarter of the
    // quota is left free.
    assert_eq!(lines[2], (16 * MIB, 64 * MIB));

    // A quota above the device: the physical numbers stand.
    let run = client(
        Runtime::Fake13,
        &[
            ("VRAMSHARE_QUOTA", "4GiB"),
            ("FAKE_CUDA_CAPACITY", "1073741824"),
        ],
        &["malloc:a:100M", "meminfo"],
    );
    assert_eq!(
        run.line("meminfo"),
        format!("meminfo rc=0 free={} total={}", 924 * MIB, 1024 * MIB)
    );

    // No quota: passed through untouched.
    let run = client(
        Runtime::Fake13,
        &[("FAKE_CUDA_CAPACITY", "1073741824")],
        &["malloc:a:100M", "meminfo"],
    );
    assert_eq!(
        run.line("meminfo"),
        format!("meminfo rc=0 free={} total={}", 924 * MIB, 1024 * MIB)
    );
    assert_eq!(run.events("alloc").len(), 1, "still traced");
}

#[test]
fn unknown_pointers_and_double_frees_get_cudas_answer() {
    let steps = [
        "free:0xdeadbeef",
        "malloc:a:1M",
        "free:a",
        "free:a",
        "meminfo",
    ];
    let bare = run_in(fake_dir(Runtime::Fake13), "client", &steps, &[], false);
    let run = client(Runtime::Fake13, &[("VRAMSHARE_QUOTA", Q32)], &steps);
    run.assert_ok();
    assert_eq!(
        run.rc("free 0xdeadbeef"),
        1,
        "cudaErrorInvalidValue from the runtime"
    );
    assert_eq!(run.rc("free 0xdeadbeef"), bare.rc("free 0xdeadbeef"));
    let frees: Vec<i32> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("free a"))
        .map(|l| l.rsplit('=').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(frees, vec![0, 1]);
    assert_eq!(
        run.number("meminfo", "free"),
        32 * MIB,
        "the double free released nothing twice"
    );
    let unknown: Vec<Value> = run
        .events("free")
        .into_iter()
        .filter(|e| e["placement"].is_null())
        .collect();
    assert_eq!(unknown.len(), 2);
    assert!(unknown.iter().all(|e| e["rc"] == 1));
}

#[test]
fn zero_and_absurd_sizes() {
    let absurd = (1u64 << 62).to_string();
    let huge = format!("malloc:h:{absurd}");
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32)],
        &["malloc:z:0", &huge, "meminfo", "free:z"],
    );
    run.assert_ok();
    assert_eq!(run.line("malloc z"), "malloc z rc=0 ptr=(nil)");
    assert_eq!(run.rc("malloc h"), 2);
    assert!(
        run.calls_with(&["cudaMallocManaged"]).is_empty(),
        "never asks for more managed memory than the machine has"
    );
    assert_eq!(run.number("meminfo", "free"), 32 * MIB);
    assert_eq!(run.rc("free z"), 0);

    for extra in [("VRAMSHARE_SPILL", "off"), ("VRAMSHARE_LOG", "error")] {
        let run = client(Runtime::Fake13, &[extra], &[&huge, "meminfo"]);
        run.assert_ok();
        assert_eq!(
            run.rc("malloc h"),
            2,
            "with no quota, the runtime's own answer"
        );
        assert_eq!(run.events("reject").len(), 1);
    }
}

#[test]
fn percent_and_per_device_quotas() {
    let gib = [("FAKE_CUDA_CAPACITY", "1073741824")];
    let run = client(
        Runtime::Fake13,
        &[gib[0], ("VRAMSHARE_QUOTA", "25%")],
        &["meminfo", "device:1", "meminfo"],
    );
    run.assert_ok();
    assert_eq!(run.meminfo(), vec![(256 * MIB, 256 * MIB); 2]);
    let run = client(
        Runtime::Fake13,
        &[gib[0], ("VRAMSHARE_QUOTA", "0=64MiB,1=32MiB")],
        &["meminfo", "device:1", "malloc:a:40M", "meminfo"],
    );
    let lines = run.meminfo();
    assert_eq!(lines[0], (64 * MIB, 64 * MIB));
    assert_eq!(
        lines[1],
        (8 * MIB, 32 * MIB),
        "40M spilled on device 1, its first 24M on the device, a quarter of the quota left free"
    );
    let spilled = run.events("alloc");
    assert_eq!(spilled[0]["device"], 1);
    assert_eq!(spilled[0]["placement"], "host");
    let quota = &run.trace()["processes"][0]["quota"];
    assert_eq!(quota["0"], 64 * MIB);
    assert_eq!(quota["1"], 32 * MIB);

    // Devices not listed have no limit.
    let run = client(
        Runtime::Fake13,
        &[gib[0], ("VRAMSHARE_QUOTA", "1=32MiB")],
        &["malloc:a:40M", "meminfo"],
    );
    assert_eq!(
        run.line("meminfo"),
        format!("meminfo rc=0 free={} total={}", 984 * MIB, 1024 * MIB)
    );
    assert_eq!(run.events("alloc")[0]["placement"], "device");
}

#[test]
fn malformed_variables_stop_the_job_with_status_2() {
    let cases = [
        ("VRAMSHARE_QUOTA", "8XB"),
        ("VRAMSHARE_QUOTA", "lots"),
        ("VRAMSHARE_QUOTA", "-1G"),
        ("VRAMSHARE_QUOTA", "1.2.3G"),
        ("VRAMSHARE_QUOTA", "150%"),
        ("VRAMSHARE_QUOTA", "0=1G,0=2G"),
        ("VRAMSHARE_QUOTA", "x=1G"),
        ("VRAMSHARE_QUOTA", "0=1G,"),
        ("VRAMSHARE_QUOTA", "99999999999TiB"),
        ("VRAMSHARE_SPILL", "disk"),
        ("VRAMSHARE_LOG", "loud"),
    ];
    for (variable, value) in cases {
        let run = client(Runtime::Fake13, &[(variable, value)], &["malloc:a:1M"]);
        assert_eq!(
            run.status.code(),
            Some(2),
            "{variable}={value}: {}",
            run.stderr
        );
        assert!(
            run.stdout.is_empty(),
            "the job must not start: {}",
            run.stdout
        );
        assert!(run.calls.is_empty());
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {:?}", run.stderr);
        assert!(
            lines[0].starts_with(&format!("vramshare: {variable}={value:?} is not valid (")),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("accepted forms: "), "{}", lines[0]);
    }
}

#[test]
fn eight_threads_of_random_allocations_leave_the_ledger_exact() {
    let dir = fake_dir(Runtime::Fake13);
    let run = run_in(
        dir,
        "stress",
        &["8", "10000", "1048576", "7"],
        &[
            ("VRAMSHARE_QUOTA", "64MiB"),
            ("FAKE_CUDA_CAPACITY", "4294967296"),
        ],
        true,
    );
    run.assert_ok();
    let live = live_blocks(&run.stdout);
    let live_bytes: u64 = live.iter().map(|(_, s)| s).sum();
    assert_eq!(run.number("total", "failures"), 0);
    let process = &run.trace()["processes"][0];
    assert_eq!(
        leaked_blocks(run.trace()),
        live,
        "the ledger holds exactly the live blocks"
    );
    let device = process["device_in_use"]["0"].as_u64().unwrap();
    let spilled = process["spilled_in_use"]["0"].as_u64().unwrap();
    // Beyond the live blocks, the ledger counts what the pool holds that no
    // trim gives back: the unused part of the chunks (2 MiB in the fake)
    // that live pooled blocks sit in. The fake's pool is one reserve, so
    // that is less than one chunk.
    let beyond = (device + spilled).checked_sub(live_bytes);
    assert!(
        beyond.is_some_and(|b| b < 2 * MIB),
        "{device} + {spilled} counted for {live_bytes} live"
    );
    assert_eq!(
        run.number("total", "free"),
        64 * MIB - device,
        "cudaMemGetInfo agrees with the ledger"
    );
    // A pool grows by whole chunks (2 MiB in the fake): between a thread's
    // cudaMallocAsync and its recount, the pool can hold up to a chunk more
    // than the quota allows, per thread allocating at that moment, until it
    // is trimmed back.
    let peak = process["peak_device"]["0"].as_u64().unwrap();
    assert!(peak <= 64 * MIB + 8 * 2 * MIB, "peak {peak}");
    assert!(
        process["counts"]["0"]["spills"].as_u64().unwrap() > 0,
        "the quota was reached"
    );
    assert!(
        process["counts"]["0"]["promotions"].as_u64().unwrap() > 0,
        "room freed was reused"
    );
    assert_eq!(
        run.events("alloc").len() as u64,
        process["counts"]["0"]["allocations"].as_u64().unwrap()
    );
}

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

#[test]
fn a_forked_child_has_its_own_ledger_and_trace() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32)],
        &["malloc:a:24M", "fork", "meminfo", "free:a"],
    );
    run.assert_ok();
    assert_eq!(run.field("fork", "status"), "0");
    let child: u32 = run.field("fork", "child").parse().unwrap();
    assert_eq!(run.traces.len(), 2, "one trace per process");
    let child_trace = &run.traces[&child];
    let child_process = &child_trace["processes"][0];
    assert_eq!(child_process["pid"], child);
    assert_eq!(
        child_process["leaked"],
        Value::Array(vec![]),
        "the parent's blocks are not the child's"
    );
    assert_eq!(child_process["peak_device"]["0"], MIB);
    assert!(child_trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["pid"] == child));
    // The child sees its own quota: 32M, of which its 1M block.
    assert_eq!(
        run.line("meminfo").to_string(),
        format!("meminfo rc=0 free={} total={}", 31 * MIB, 32 * MIB)
    );
    let parent = run.traces.iter().find(|(pid, _)| **pid != child).unwrap().1;
    assert_eq!(parent["processes"][0]["peak_device"]["0"], 24 * MIB);
    assert_eq!(
        parent["events"].as_array().unwrap().len(),
        2,
        "a's alloc and free only"
    );
}

#[test]
fn pitched_async_and_pool_allocations() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", Q32)],
        &[
            "pitch:p:1000:1024", // 1024 * 1024: 1M on the device
            "m3d:q:100:64:64",   // 512 * 64 * 64: 2M
            "async:r:8M",
            "async_ptsz:s:8M",
            "pool:t:8M",
            "pool_ptsz:u:8M", // 27M + 8M > 32M: spilled
            "pitch:v:3000:4096",
            "m3d:w:3000:64:64",
            "touch:u",
            "freeasync:u",
            "freeasync_ptsz:s",
            "freeasync:r",
            "meminfo",
        ],
    );
    run.assert_ok();
    for name in ["p", "q", "r", "s", "t", "u", "v", "w"] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap();
        assert!(line.contains("rc=0"), "{line}");
    }
    assert_eq!(
        run.field("pitched v", "pitch"),
        "3072",
        "spilled pitched rows keep CUDA's alignment"
    );
    assert_eq!(run.field("pitched w", "pitch"), "3072");
    assert_eq!(run.field("pitched w", "xsize"), "3000");
    let placements = run.allocations();
    let expect = [
        ("cudaMallocPitch", "device"),
        ("cudaMalloc3D", "device"),
        ("cudaMallocAsync", "device"),
        ("cudaMallocAsync_ptsz", "device"),
        ("cudaMallocFromPoolAsync", "device"),
        ("cudaMallocFromPoolAsync_ptsz", "host"),
        ("cudaMallocPitch", "host"),
        ("cudaMalloc3D", "host"),
    ];
    assert_eq!(
        placements,
        expect.map(|(a, p)| (a.to_string(), p.to_string()))
    );
    // The spilled block freed with cudaFreeAsync went to cudaFree (managed
    // memory), the device ones to cudaFreeAsync.
    let u = run.field("pool_ptsz u", "ptr");
    assert_eq!(
        run.calls_with(&["cudaFree", &format!("ptr={u}"), "rc=0"])
            .len(),
        1,
        "{:#?}",
        run.calls
    );
    assert_eq!(run.calls_with(&["cudaFreeAsync_ptsz", "rc=0"]).len(), 1);
    assert_eq!(run.calls_with(&["cudaFreeAsync", "rc=0"]).len(), 1);
}

#[test]
fn no_device_errors_pass_through_untouched() {
    let steps = [
        "malloc:a:1M",
        "managed:b:1M",
        "async:c:1M",
        "meminfo",
        "free:0x1000",
    ];
    let bare = run_in(
        fake_dir(Runtime::Fake13),
        "client",
        &steps,
        &[("FAKE_CUDA_NO_DEVICE", "1")],
        false,
    );
    let run = client(
        Runtime::Fake13,
        &[("FAKE_CUDA_NO_DEVICE", "1"), ("VRAMSHARE_QUOTA", Q32)],
        &steps,
    );
    run.assert_ok();
    assert_eq!(run.stdout, bare.stdout);
    assert_eq!(run.rc("malloc a"), 100);
}

#[test]
fn processes_that_never_call_cuda_write_nothing() {
    let work = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("sh")
        .args(["-c", "true; ls >/dev/null"])
        .env("LD_PRELOAD", shim_library())
        .env("VRAMSHARE_QUOTA", "1GiB")
        .env("VRAMSHARE_TRACE", work.path().join("t-%p.json"))
        .env("VRAMSHARE_DIR", work.path().join("shm"))
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read_dir(work.path()).unwrap().count(),
        0,
        "no trace, no shared files"
    );
}

#[test]
fn processes_of_one_job_share_a_trace_file_without_pid() {
    let dir = fake_dir(Runtime::Fake13);
    let work = tempfile::tempdir().unwrap();
    let trace = work.path().join("job.json");
    let client = dir.join("client");
    let script = format!(
        "{c} malloc:a:1M && {c} malloc:b:2M free:b",
        c = client.display()
    );
    let job = |expect_processes: usize| {
        let status = std::process::Command::new("sh")
            .args(["-c", &script])
            .env_remove("VRAMSHARE_JOB")
            .env("LD_PRELOAD", shim_library())
            .env("VRAMSHARE_TRACE", &trace)
            .env("VRAMSHARE_DIR", work.path().join("shm"))
            .status()
            .unwrap();
        assert!(status.success());
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        assert_eq!(
            value["processes"].as_array().unwrap().len(),
            expect_processes,
            "{value:#}"
        );
        value
    };
    let first = job(2);
    assert_eq!(first["events"].as_array().unwrap().len(), 3);
    // A second run of the job replaces the file instead of adding to it.
    let second = job(2);
    assert_ne!(first["job"], second["job"]);
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
    let small: Vec<String> = run
        .events("alloc")
        .iter()
        .filter(|e| e["size"] == 4096)
        .map(|e| e["placement"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(small, ["host"]);
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
    assert!(
        !run.stderr.contains("counted over the quota"),
        "{}",
        run.stderr
    );
}
