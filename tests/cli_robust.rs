//! The `vramshare` command in a hostile or careless environment: output
//! that cannot be written, numbers near the end of 64 bits, command lines
//! that would drive the terminal, and shared files that are not there.

#[path = "common/command.rs"]
mod command;
mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use command::*;
use common::*;
use serde_json::{json, Value};
use vramshare_common::files::open_or_create;
use vramshare_common::pool::{PoolFile, Pools};
use vramshare_common::process;
use vramshare_common::registry::{ProcessSlot, Registry, RegistryFile, NO_QUOTA};
use vramshare_common::ring::RingFile;

/// Shared files in `dir` in which this test process is a live job with
/// `cmdline`, its slot filled in by `fill`; and an empty trace ring.
fn live_as_me(dir: &Path, cmdline: &str, fill: impl FnOnce(&ProcessSlot)) {
    let registry = Registry::new(open_or_create::<RegistryFile>(dir).unwrap()).unwrap();
    let me = std::process::id();
    let slot = registry
        .claim(
            me,
            process::start_time(me).unwrap(),
            cmdline,
            vramshare_common::settings::Spill::Host,
        )
        .unwrap();
    fill(slot);
    open_or_create::<RingFile>(dir).unwrap();
}

fn set(counter: &std::sync::atomic::AtomicU64, value: u64) {
    counter.store(value, std::sync::atomic::Ordering::Relaxed);
}

/// A folder where every subcommand has something to print: this process
/// live with a quota, a pool with a budget, and a trace file.
fn busy_dir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), "python train.py", |slot| {
        set(&slot.devices()[0].quota, 64 * MIB);
        set(&slot.devices()[0].device_bytes, 8 * MIB);
        set(&slot.devices()[0].peak_device, 8 * MIB);
    });
    let pools = Pools::new(open_or_create::<PoolFile>(dir.path()).unwrap()).unwrap();
    pools.join("team", || Some(())).unwrap().1.set_budget(
        vramshare_common::size::Device::new(0).unwrap(),
        Some(64 * MIB),
    );
    let trace = dir.path().join("trace.json");
    let process = json!({"pid": 7, "cmdline": "job"});
    let alloc = event(0, "alloc", "cudaMalloc", "0x1000", MIB, "device");
    std::fs::write(&trace, trace_json(&[process], &[alloc])).unwrap();
    (dir, trace.to_str().unwrap().to_string())
}

/// Every subcommand that prints, with its arguments for `busy_dir`.
fn printing_commands(dir: &str, trace: &str) -> Vec<Vec<String>> {
    let me = std::process::id().to_string();
    [
        vec!["ps", "--dir", dir],
        vec!["ps", "--json", "--dir", dir],
        vec!["top", "--iterations", "2", "--interval", "50", "--dir", dir],
        vec!["dump", "--dir", dir],
        vec!["report", trace],
        vec!["quota", "get", "--dir", dir],
        vec!["quota", "get", "--json", "--dir", dir],
        vec!["quota", "set", "--pid", &me, "32MiB", "--dir", dir],
        vec!["quota", "set", "--pool", "team", "32MiB", "--dir", dir],
    ]
    .iter()
    .map(|args| args.iter().map(|a| a.to_string()).collect())
    .collect()
}

fn args_of(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A trace file of `vramshare-trace/1` with these processes and events.
fn trace_json(processes: &[Value], events: &[Value]) -> String {
    json!({"schema": "vramshare-trace/1", "processes": processes, "events": events}).to_string()
}

fn event(seq: u64, op: &str, api: &str, ptr: &str, size: u64, placement: &str) -> Value {
    json!({
        "seq": seq, "t_ns": seq, "pid": 7, "tid": 7, "device": 0, "op": op,
        "api": api, "ptr": ptr, "size": size, "placement": placement, "rc": 0
    })
}

#[test]
fn a_full_disk_is_one_line_and_status_1() {
    let (dir, trace) = busy_dir();
    for args in printing_commands(dir.path().to_str().unwrap(), &trace) {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = command(&args_of(&args)).stdout(full).output().unwrap();
        assert_eq!(
            (out.status.code(), text(&out.stderr).as_str()),
            (
                Some(1),
                "vramshare: cannot write the output: No space left on device (os error 28)\n"
            ),
            "{args:?}"
        );
    }
}

#[test]
fn a_pipe_closed_before_the_output_ends_the_command_quietly() {
    let (dir, trace) = busy_dir();
    for args in printing_commands(dir.path().to_str().unwrap(), &trace) {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = command(&args_of(&args)).stdout(writer).output().unwrap();
        assert_eq!(
            (out.status.code(), text(&out.stderr).as_str()),
            (Some(0), ""),
            "{args:?}"
        );
    }
}

/// `vramshare top --iterations N | head -1`: the reader goes away after the
/// first line, while the command still has refreshes to print.
#[test]
fn top_into_a_reader_that_stops_after_one_line_ends_quietly() {
    let (dir, _) = busy_dir();
    let dir = dir.path().to_str().unwrap();
    let mut top = command(&[
        "top",
        "--iterations",
        "100",
        "--interval",
        "50",
        "--dir",
        dir,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut first = String::new();
    BufReader::new(top.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("1 processes under vramshare"), "{first}");
    let out = top.wait_with_output().unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stderr).as_str()),
        (Some(0), "")
    );
}

fn report(trace: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trace.json");
    std::fs::write(&file, trace).unwrap();
    let out = vramshare(&["report", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// What `human_bytes` shows for 2^64 - 1 bytes: sums that reach it stay there.
const MOST: &str = "16777216.00 TiB";

#[test]
fn report_sums_of_sizes_near_2_to_the_64_do_not_wrap() {
    let huge = u64::MAX - 1;
    let leak = |ptr: &str, size: u64| json!({"ptr": ptr, "size": size, "placement": "host", "api": "cudaMalloc"});
    let process = json!({
        "pid": 7, "cmdline": "job", "quota": {"0": huge},
        "leaked": [leak("0x1000", huge), leak("0x2000", huge), leak("0x3000", 2)]
    });
    let mut events = Vec::new();
    for (seq, (op, placement)) in [
        ("alloc", "host"),
        ("alloc", "host"),
        ("promote", "device"),
        ("promote", "device"),
        ("reject", "device"),
        ("reject", "device"),
        ("demote", "host"),
        ("demote", "host"),
    ]
    .into_iter()
    .enumerate()
    {
        let ptr = format!("{:#x}", 0x1000 * (seq % 2 + 1));
        events.push(event(seq as u64, op, "cudaMalloc", &ptr, huge, placement));
    }
    let text = report(&trace_json(&[process], &events));
    assert!(
        text.contains(&format!(
            "spilled to host: 2 allocations, {MOST}; promoted back: 2, {MOST}; \
             rejected: 2 ({MOST}); demoted to host: 2, {MOST}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("leaks (at exit): 3 blocks, {MOST}: ")),
        "{text}"
    );

    // Without the shim's list, the leaks are the events' unfreed blocks.
    let process = json!({"pid": 7, "cmdline": "job"});
    let allocs: Vec<Value> = (0..3)
        .map(|i| {
            event(
                i,
                "alloc",
                "cudaMalloc",
                &format!("{:#x}", 0x1000 * (i + 1)),
                huge,
                "device",
            )
        })
        .collect();
    let text = report(&trace_json(&[process], &allocs));
    assert!(
        text.contains(&format!(
            "leaks (not freed by the end of the trace): 3 blocks, {MOST}: "
        )),
        "{text}"
    );
}

#[test]
fn top_totals_near_2_to_the_64_do_not_wrap() {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), "job", |slot| {
        for device in &slot.devices()[..2] {
            set(&device.device_bytes, u64::MAX / 2 + 1);
            set(&device.spilled_bytes, u64::MAX / 2 + 1);
            set(&device.peak_device, u64::MAX / 2 + 1);
        }
    });
    let out = vramshare(&[
        "top",
        "--iterations",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = text(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        first,
        format!("1 processes under vramshare: {MOST} on GPUs, {MOST} spilled to host memory")
    );
}

/// `quota get --json`: (the process's quota on device 0, the pool's budget).
fn quota_and_budget(dir: &str) -> (Value, Value) {
    let out = vramshare(&["quota", "get", "--json", "--dir", dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        got["processes"][0]["quota"].clone(),
        got["pools"][0]["budget"].clone(),
    )
}

#[test]
fn a_quota_of_2_to_the_64_less_1_is_refused_since_it_means_none() {
    let (dir, _) = busy_dir();
    let dir = dir.path().to_str().unwrap();
    let me = std::process::id().to_string();
    let before = (json!(64 * MIB), json!(64 * MIB));
    assert_eq!(quota_and_budget(dir), before);
    let max = NO_QUOTA.to_string();
    for target in [["--pid", me.as_str()], ["--pool", "team"]] {
        for size in [max.clone(), format!("{max}B"), format!("{max} b")] {
            let out = vramshare(&["quota", "set", target[0], target[1], &size, "--dir", dir]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{target:?} {size}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "the largest size accepted is {} bytes",
                    NO_QUOTA - 1
                )) && stderr.contains("accepted forms: a size such as 8GiB"),
                "{stderr}"
            );
            assert_eq!(quota_and_budget(dir), before, "left as it was");
        }
    }
    // One byte less is a quota like any other.
    let largest = (NO_QUOTA - 1).to_string();
    for target in [["--pid", me.as_str()], ["--pool", "team"]] {
        let out = vramshare(&["quota", "set", target[0], target[1], &largest, "--dir", dir]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).ends_with(&format!("64.00 MiB -> {MOST}\n")));
    }
    assert_eq!(
        quota_and_budget(dir),
        (json!(NO_QUOTA - 1), json!(NO_QUOTA - 1))
    );
}

/// Control characters of every kind: CSI and OSC sequences, a bell, a
/// newline and carriage return, a C1 CSI, and a right-to-left override.
const HOSTILE: &str = "evil \x1b[2J\x1b]0;owned\x07 one\ntwo\rthree \u{9b}31m \u{202e}txt.exe";
const ESCAPED: &str = r"evil \x1b[2J\x1b]0;owned\x07 one\ntwo\rthree \u{9b}31m \u{202e}txt.exe";

fn assert_no_controls(what: &str, output: &str) {
    let found: Vec<char> = output
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || *c == '\u{202e}')
        .collect();
    assert!(found.is_empty(), "{what} printed {found:?}:\n{output}");
}

#[test]
fn ps_and_top_print_control_characters_of_a_command_line_escaped() {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), HOSTILE, |slot| {
        set(&slot.devices()[0].peak_device, MIB);
    });
    let dir = dir.path().to_str().unwrap();
    for args in [
        vec!["ps", "--dir", dir],
        vec!["top", "--iterations", "1", "--dir", dir],
    ] {
        let out = vramshare(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_no_controls(args[0], &stdout);
        let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("evil")).collect();
        assert_eq!(rows.len(), 1, "{stdout}");
        assert!(rows[0].ends_with(ESCAPED), "{stdout}");
    }
    // JSON keeps the command line exactly, escaped the JSON way.
    let out = vramshare(&["ps", "--json", "--dir", dir]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["cmdline"], HOSTILE);
}

/// A pool table is a shared file too: a name written into it by hand is
/// not held to the names `--pool` accepts.
#[test]
fn a_pool_name_with_control_characters_is_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), "job", |_| {});
    let pools = Pools::new(open_or_create::<PoolFile>(dir.path()).unwrap()).unwrap();
    let name = "t\x1b[2J\nforged row\x07";
    pools
        .join(name, || Some(()))
        .unwrap()
        .1
        .set_budget(vramshare_common::size::Device::new(0).unwrap(), Some(MIB));
    let dir = dir.path().to_str().unwrap();
    for args in [vec!["ps", "--dir", dir], vec!["quota", "get", "--dir", dir]] {
        let out = vramshare(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_no_controls(args[0], &stdout);
        let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("forged")).collect();
        assert_eq!(rows.len(), 1, "{stdout}");
        assert!(
            rows[0].starts_with(r"t\x1b[2J\nforged row\x07 "),
            "{stdout}"
        );
    }
}

#[test]
fn report_prints_control_characters_from_the_trace_escaped() {
    // A job whose command line holds an escape sequence, traced through the
    // shim, dumped, and reported.
    let dir = tempfile::tempdir().unwrap();
    let client = fake_dir(Runtime::Fake13).join("client");
    let dir_arg = dir.path().to_str().unwrap();
    let out = vramshare(&[
        "run",
        "--dir",
        dir_arg,
        "--",
        client.to_str().unwrap(),
        "malloc:\x1b[2J:1M",
        "free:\x1b[2J",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = dir.path().join("dump.json");
    let out = vramshare(&["dump", "--dir", dir_arg, "-o", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let text = report(&std::fs::read_to_string(&file).unwrap());
    assert_no_controls("report", &text);
    assert!(
        text.contains(&format!(
            "{} malloc:\\x1b[2J:1M free:\\x1b[2J\n",
            client.display()
        )),
        "{text}"
    );

    // A trace written by hand: every string it holds is shown escaped.
    let process = json!({
        "pid": 7, "cmdline": HOSTILE, "quota": {"0\x1b[2J": 1},
        "leaked": [{"ptr": "0x1\x1b[2J", "size": 1, "placement": "\x07", "api": "\u{9b}1m"}]
    });
    let events = [event(0, "alloc", "cuda\nMalloc", "0x1\r", 1, "dev\x1bice")];
    let text = report(&trace_json(&[process], &events));
    assert_no_controls("report", &text);
    assert!(text.contains(&format!("process 7  {ESCAPED}\n")), "{text}");
    assert!(text.contains(r"device 0\x1b[2J: quota"), "{text}");
    assert!(
        text.contains(r"1 B at 0x1\x1b[2J (\u{9b}1m, \x07)"),
        "{text}"
    );
    assert!(
        text.contains(r"1 B at 0x1\r (cuda\nMalloc, dev\x1bice)"),
        "{text}"
    );
}

fn assert_dump_refused(dir: &Path, expect: &str) {
    let out = vramshare(&["dump", "--dir", dir.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("vramshare: ") && stderr.contains(expect),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn dump_refuses_a_missing_or_corrupt_registry_beside_a_good_ring() {
    let dir = tempfile::tempdir().unwrap();
    open_or_create::<RingFile>(dir.path()).unwrap();
    assert_dump_refused(
        dir.path(),
        &format!("{} does not exist", dir.path().join("registry").display()),
    );

    let out = vramshare(&[
        "run",
        "--dir",
        dir.path().to_str().unwrap(),
        "--",
        fake_dir(Runtime::Fake13).join("client").to_str().unwrap(),
        "malloc:a:1M",
        "free:a",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let registry = dir.path().join("registry");
    let good = std::fs::read(&registry).unwrap();
    let mut bad = good.clone();
    bad[..8].copy_from_slice(b"garbage!");
    std::fs::write(&registry, &bad).unwrap();
    assert_dump_refused(
        dir.path(),
        "registry: not a vramshare process registry (wrong magic number)",
    );
    std::fs::write(&registry, &good[..1000]).unwrap();
    assert_dump_refused(dir.path(), "truncated or corrupt");
    std::fs::write(&registry, &good).unwrap();
    let out = vramshare(&["dump", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn quota_set_refuses_a_device_the_process_does_not_see() {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), "job", |slot| slot.set_device_count(2));
    let me = std::process::id().to_string();
    let dir_arg = dir.path().to_str().unwrap();
    let refused = vramshare(&[
        "quota", "set", "--dir", dir_arg, "--pid", &me, "--device", "5", "1GiB",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("sees 2 devices")
            && text(&refused.stderr).contains("no device 5"),
        "{}",
        text(&refused.stderr)
    );
    let set = vramshare(&[
        "quota", "set", "--dir", dir_arg, "--pid", &me, "--device", "1", "1GiB",
    ]);
    assert!(set.status.success(), "{}", text(&set.stderr));
}

#[test]
fn a_fifo_in_place_of_a_shared_file_is_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.path().join("registry"))
        .status()
        .unwrap();
    assert!(made.success());
    for args in [
        &["ps"][..],
        &["top", "--iterations", "1"],
        &["quota", "get"],
    ] {
        let mut child = command(args)
            .args(["--dir", dir.path().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > std::time::Duration::from_secs(10) {
                child.kill().unwrap();
                panic!("{args:?} hung on a FIFO");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            text(&output.stderr).contains("a FIFO or pipe, not a regular file"),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn ps_json_shows_each_processs_kernel_launches_and_their_rate() {
    let dir = tempfile::tempdir().unwrap();
    live_as_me(dir.path(), "train", |slot| {
        slot.launches()
            .store(5000, std::sync::atomic::Ordering::Relaxed)
    });
    let output = vramshare(&["ps", "--json", "--dir", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows[0]["launches"], 5000);
    let rate = rows[0]["launches_per_second"].as_f64().unwrap();
    assert!(rate > 0.0 && rate.is_finite(), "{rate}");
}
