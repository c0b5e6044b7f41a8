//! The `vramshare` command against real processes under the shim (C clients
//! on the fake runtime), the way an operator uses it.

#[path = "common/command.rs"]
mod command;
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use command::*;
use common::*;
use serde_json::Value;
use vramshare_common::trace_json::TraceJson;

#[test]
fn ps_shows_a_running_job_and_forgets_it_when_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = spawn_run(
        dir.path(),
        "32MiB",
        &["malloc:a:24M", "malloc:b:16M", "sleep:1500"],
    );
    let row = wait_for_row(dir.path(), job.id(), |r| {
        r["devices"]["0"]["spilled_bytes"] == 16 * MIB
    });
    let device = &row["devices"]["0"];
    assert_eq!(device["quota"], 32 * MIB);
    assert_eq!(device["device_bytes"], 24 * MIB);
    assert_eq!(device["peak_device"], 24 * MIB);
    assert_eq!(device["spills"], 1);
    assert_eq!(row["spill"], "host");
    assert!(
        row["cmdline"]
            .as_str()
            .unwrap()
            .ends_with("client malloc:a:24M malloc:b:16M sleep:1500"),
        "{row}"
    );
    let table = text(&vramshare(&["ps", "--dir", dir.path().to_str().unwrap()]).stdout);
    assert!(
        table.lines().any(|l| l.contains(&job.id().to_string())
            && l.contains("24.00 MiB")
            && l.contains("16.00 MiB")),
        "{table}"
    );
    let top = text(
        &vramshare(&[
            "top",
            "--iterations",
            "1",
            "--dir",
            dir.path().to_str().unwrap(),
        ])
        .stdout,
    );
    assert!(
        top.starts_with("1 processes under vramshare: 24.00 MiB on GPUs, 16.00 MiB spilled"),
        "{top}"
    );
    assert!(job.wait().unwrap().success());
    wait_gone(dir.path(), job.id(), Duration::from_millis(100));
}

#[test]
fn a_job_killed_with_sigkill_stops_counting() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = spawn_run(dir.path(), "32MiB", &["malloc:a:8M", "sleep:20000"]);
    wait_for_row(dir.path(), job.id(), |r| {
        r["devices"]["0"]["device_bytes"] == 8 * MIB
    });
    job.kill().unwrap(); // SIGKILL: no exit handler runs
    wait_gone(dir.path(), job.id(), Duration::from_secs(1));
    job.wait().unwrap();
    // Its slot is reclaimed by the next process.
    let mut next = spawn_run(dir.path(), "32MiB", &["malloc:a:4M", "sleep:300"]);
    wait_for_row(dir.path(), next.id(), |r| {
        r["devices"]["0"]["device_bytes"] == 4 * MIB
    });
    assert_eq!(ps_json(dir.path()).len(), 1);
    next.wait().unwrap();
}

#[test]
fn run_passes_the_variables_and_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let options = [
        "--quota",
        "32MiB",
        "--spill",
        "off",
        "--trace",
        trace.to_str().unwrap(),
    ];
    let out = run_client(
        dir.path(),
        &options,
        &["malloc:a:24M", "malloc:b:16M", "no-such-step"],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "the client's own status: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("malloc b rc=2"),
        "spill off reached the job"
    );
    let trace = TraceJson::parse(&std::fs::read_to_string(trace).unwrap()).unwrap();
    assert_eq!(trace.processes[0].quota["0"], 32 * MIB);
    assert!(dir.path().join("ring").exists(), "--dir reached the job");

    let out = vramshare(&["run", "--", "/no/such/program"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("cannot run /no/such/program"));

    let out = vramshare(&["run", "--quota", "8XB", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown unit \"xb\"; accepted forms:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_finds_the_library_beside_itself() {
    let bin = tempfile::tempdir().unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_vramshare"),
        bin.path().join("vramshare"),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--quota",
            "1GiB",
            "--",
            "sh",
            "-c",
            "echo $LD_PRELOAD $VRAMSHARE_QUOTA",
        ];
        args.extend_from_slice(extra);
        Command::new(bin.path().join("vramshare"))
            .args(&args)
            .env_remove("VRAMSHARE_LIB")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap()
    };
    let missing = run(&[]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("libvramshare.so is missing"),
        "{}",
        text(&missing.stderr)
    );
    std::fs::copy(shim_library(), bin.path().join("libvramshare.so")).unwrap();
    let found = run(&[]);
    assert!(found.status.success(), "{}", text(&found.stderr));
    assert_eq!(
        text(&found.stdout).trim(),
        format!("{} 1GiB", bin.path().join("libvramshare.so").display())
    );
}

#[test]
fn dump_and_report_name_the_leak_a_client_left() {
    let dir = tempfile::tempdir().unwrap();
    let steps = [
        "malloc:kept:24M",
        "malloc:b:16M",
        "free:b",
        "malloc:c:1M",
        "free:c",
    ];
    let out = run_client(dir.path(), &["--quota", "32MiB"], &steps);
    assert!(out.status.success());
    let kept = text(&out.stdout)
        .lines()
        .find(|l| l.starts_with("malloc kept"))
        .unwrap()
        .rsplit('=')
        .next()
        .unwrap()
        .to_string();
    let file = dir.path().join("dump.json");
    let out = vramshare(&[
        "dump",
        "--dir",
        dir.path().to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let trace = TraceJson::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(trace.events_lost, Some(0));
    let ops: Vec<&str> = trace.events.iter().map(|e| e.op.as_str()).collect();
    assert_eq!(ops, ["alloc", "alloc", "free", "alloc", "free"]);
    // The client has exited; its registry slot still names it.
    let process = &trace.processes[0];
    assert!(
        process
            .cmdline
            .ends_with("client malloc:kept:24M malloc:b:16M free:b malloc:c:1M free:c"),
        "{process:?}"
    );
    assert_eq!(process.quota["0"], 32 * MIB);
    assert_eq!(process.device_in_use["0"], 24 * MIB, "what it held at exit");
    assert!(trace
        .events
        .iter()
        .any(|e| e.placement.as_deref() == Some("host")));
    let report = text(&vramshare(&["report", file.to_str().unwrap()]).stdout);
    assert!(
        report.contains(&format!(
            "leaks (not freed by the end of the trace): 1 blocks, 24.00 MiB: 24.00 MiB at {kept}"
        )),
        "{report}"
    );
    assert!(
        report.contains("spilled to host: 1 allocations, 16.00 MiB"),
        "{report}"
    );

    // --pid keeps one process's events; stdout without -o.
    let out = vramshare(&["dump", "--dir", dir.path().to_str().unwrap(), "--pid", "1"]);
    let only: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(only["events"], Value::Array(vec![]));

    // The shim's own trace at exit reports the same leak, as a leak at exit.
    let trace_file = dir.path().join("exit.json");
    let out = run_client(
        dir.path(),
        &["--trace", trace_file.to_str().unwrap()],
        &["malloc:kept:2M"],
    );
    assert!(out.status.success());
    let report = text(&vramshare(&["report", trace_file.to_str().unwrap()]).stdout);
    assert!(
        report.contains("leaks (at exit): 1 blocks, 2.00 MiB"),
        "{report}"
    );
}

#[test]
fn a_quota_changed_while_the_job_runs_demotes_then_promotes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let client = client_path();
    let mut job = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(["run", "--quota", "64MiB", "--trace"])
        .arg(&trace)
        .args(["--dir", dir.path().to_str().unwrap(), "--", &client])
        // m: the job's own managed memory (movable); a: cudaMalloc (not
        // movable); b spills.
        .args([
            "managed:m:16M",
            "malloc:a:40M",
            "malloc:b:16M",
            "sleep:3000",
        ])
        .args(["malloc:c:4M", "sleep:3000"])
        // Spilled blocks are managed memory here, promoted when room comes;
        // the spill tier's blocks come back when next used (tests/tier.rs).
        .env("VRAMSHARE_MOVES", "off")
        .env("VRAMSHARE_LIB", shim_library())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = job.id();
    let dir_arg = dir.path().to_str().unwrap();
    let device = |r: &Value, key: &str| r["devices"]["0"][key].as_u64().unwrap();
    wait_for_row(dir.path(), pid, |r| device(r, "spilled_bytes") == 16 * MIB);

    // Cut to 32 MiB: m goes to the host; a cannot move.
    let cut = vramshare(&[
        "quota",
        "set",
        "--pid",
        &pid.to_string(),
        "32MiB",
        "--dir",
        dir_arg,
    ]);
    assert!(cut.status.success(), "{}", text(&cut.stderr));
    assert_eq!(
        text(&cut.stdout).trim(),
        format!("pid {pid} device 0: quota 64.00 MiB -> 32.00 MiB")
    );
    let asked = Instant::now();
    let row = wait_for_row(dir.path(), pid, |r| device(r, "spilled_bytes") == 32 * MIB);
    let noticed = asked.elapsed();
    assert_eq!(
        (device(&row, "quota"), device(&row, "device_bytes")),
        (32 * MIB, 40 * MIB)
    );
    // The shim looks every 50 ms; the margin is for a loaded machine.
    assert!(
        noticed < Duration::from_millis(1000),
        "noticed after {noticed:?}"
    );

    // c comes while the job is still over its quota: to the host.
    let row = wait_for_row(dir.path(), pid, |r| device(r, "allocations") == 4);
    assert_eq!(device(&row, "spilled_bytes"), 36 * MIB);
    let get = vramshare(&[
        "quota",
        "get",
        "--pid",
        &pid.to_string(),
        "--json",
        "--dir",
        dir_arg,
    ]);
    let got: Value = serde_json::from_slice(&get.stdout).unwrap();
    assert_eq!(got["processes"][0]["quota"], 32 * MIB);

    // Raised to 128 MiB: everything comes back, largest first.
    let raise = vramshare(&[
        "quota",
        "set",
        "--pid",
        &pid.to_string(),
        "128MiB",
        "--dir",
        dir_arg,
    ]);
    assert!(raise.status.success(), "{}", text(&raise.stderr));
    let row = wait_for_row(dir.path(), pid, |r| device(r, "spilled_bytes") == 0);
    assert_eq!(device(&row, "device_bytes"), 76 * MIB);
    assert!(job.wait().unwrap().success());

    let trace_path = trace.clone();
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let moves: Vec<(String, u64)> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] == "demote" || e["op"] == "promote")
        .map(|e| {
            (
                e["op"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap() / MIB,
            )
        })
        .collect();
    let m = |op: &str, size| (op.to_string(), size);
    assert_eq!(
        moves,
        [
            m("demote", 16),
            m("promote", 16),
            m("promote", 16),
            m("promote", 4)
        ],
        "m demoted at the cut; b, m and c promoted at the raise"
    );
    let report = vramshare(&["report", trace_path.to_str().unwrap()]);
    assert!(
        text(&report.stdout).contains(
            "promoted back: 3, 36.00 MiB; rejected: 0 (0 B); demoted to host: 1, 16.00 MiB"
        ),
        "{}",
        text(&report.stdout)
    );

    // Not for a process that is not running, and not as a percentage.
    let gone = vramshare(&[
        "quota",
        "set",
        "--pid",
        &pid.to_string(),
        "1GiB",
        "--dir",
        dir_arg,
    ]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(text(&gone.stderr).contains(&format!("no live vramshare process {pid}")));
    let percent = vramshare(&["quota", "set", "--pid", "1", "50%", "--dir", dir_arg]);
    assert_eq!(percent.status.code(), Some(2));
    assert!(text(&percent.stderr).contains("accepted forms"));
}

#[test]
fn ps_shows_pools_with_their_budgets_members_and_priorities() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let client = client_path();
    let spawn = |priority: &str, size: &str| {
        Command::new(env!("CARGO_BIN_EXE_vramshare"))
            .args([
                "run",
                "--pool",
                "team",
                "--pool-quota",
                "64MiB",
                "--priority",
                priority,
            ])
            .args([
                "--dir",
                dir_arg,
                "--",
                &client,
                &format!("malloc:a:{size}"),
                "sleep:1500",
            ])
            .env("VRAMSHARE_LIB", shim_library())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut high = spawn("high", "16M");
    let mut low = spawn("low", "8M");
    wait_for_row(dir.path(), low.id(), |r| {
        r["devices"]["0"]["device_bytes"] == 8 * MIB
    });
    let row = wait_for_row(dir.path(), high.id(), |r| {
        r["devices"]["0"]["device_bytes"] == 16 * MIB
    });
    assert_eq!(
        (&row["pool"], &row["priority"]),
        (&"team".into(), &"high".into())
    );
    let out = vramshare(&["ps", "--dir", dir_arg]);
    let table = text(&out.stdout);
    let pool_line = table
        .lines()
        .find(|l| l.starts_with("team "))
        .unwrap_or_else(|| panic!("{table}"));
    let words: Vec<&str> = pool_line.split_whitespace().collect();
    assert_eq!(
        &words[1..6],
        ["0", "64.00", "MiB", "24.00", "MiB"],
        "{pool_line}"
    );
    assert!(
        pool_line.contains(&format!("{} (high)", high.id())),
        "{pool_line}"
    );
    assert!(
        pool_line.contains(&format!("{} (low)", low.id())),
        "{pool_line}"
    );
    // The budget changed for the whole pool.
    let set = vramshare(&["quota", "set", "--pool", "team", "32MiB", "--dir", dir_arg]);
    assert_eq!(
        text(&set.stdout).trim(),
        "pool team device 0: budget 64.00 MiB -> 32.00 MiB"
    );
    let got = vramshare(&["quota", "get", "--json", "--dir", dir_arg]);
    let got: Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(got["pools"][0]["budget"], 32 * MIB);
    let missing = vramshare(&["quota", "set", "--pool", "nobody", "1GiB", "--dir", dir_arg]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("no pool \"nobody\""));
    assert!(high.wait().unwrap().success());
    assert!(low.wait().unwrap().success());
}
