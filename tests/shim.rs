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
    // A pool grows by whole chunks (2 MiB in the fake), counted only once
    // the allocation is made: room for each thread's growth is held before
    // it asks, and the bytes of a block freed in stream order stay counted
    // until the stream reaches the free, so that no moment of the run had
    // more on the device than the quota.
    let peak = process["peak_device"]["0"].as_u64().unwrap();
    assert!(peak <= 64 * MIB, "peak {peak}: {}", process["pools"]);
    assert!(process["pools"]["growths"].as_u64().unwrap() > 0);
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
