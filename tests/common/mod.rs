//! Test harness: builds the fake CUDA runtimes and the C clients, and runs a
//! client under `LD_PRELOAD=libvramshare.so` the way a user runs a job.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod build;
pub use build::*;

pub const MIB: u64 = 1 << 20;

/// The variables of a run with moves on, on one fake GPU (a process that
/// sees two makes no tier blocks), under `quota`, and `more`.
pub fn moving<'a>(quota: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    moves_of("on", quota, more)
}

/// As [`moving`], with moves beside the kernels (`VRAMSHARE_MOVES=overlap`).
pub fn moving_beside<'a>(quota: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    moves_of("overlap", quota, more)
}

fn moves_of<'a>(
    moves: &'a str,
    quota: &'a str,
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut vars = vec![
        ("VRAMSHARE_QUOTA", quota),
        ("VRAMSHARE_MOVES", moves),
        ("FAKE_CUDA_DEVICES", "1"),
    ];
    vars.extend_from_slice(more);
    vars
}

/// An event's address, however the trace writes it.
pub fn ptr_of(event: &Value) -> u64 {
    match &event["ptr"] {
        Value::String(text) => hex(text),
        other => other.as_u64().unwrap(),
    }
}

/// The tier's moves in the trace, in order, as (op, address).
pub fn tier_moves(run: &Run) -> Vec<(String, u64)> {
    run.trace()["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["op"] == "promote" || e["op"] == "demote")
        .map(|e| (e["op"].as_str().unwrap().to_string(), ptr_of(e)))
        .collect()
}

/// Where a run's allocations were placed, in order.
pub fn placements(run: &Run) -> Vec<String> {
    run.allocations()
        .into_iter()
        .map(|(_, placement)| placement)
        .collect()
}

/// The fake driver's calls that made host memory.
pub fn host_memory_made(run: &Run) -> Vec<&String> {
    run.calls
        .iter()
        .filter(|c| c.contains("cuMemCreate") && !c.contains("location=device"))
        .collect()
}

/// The test clients' kernel launch paths: each step's HOW, and the call it
/// makes; the runtime's, then the driver's (graph launches apart).
pub const RUNTIME_KERNEL_PATHS: [(&str, &str); 8] = [
    ("rt", "cudaLaunchKernel"),
    ("rt_ptsz", "cudaLaunchKernel_ptsz"),
    ("stub", "__cudaLaunchKernel"),
    ("stub_ptsz", "__cudaLaunchKernel_ptsz"),
    ("exc", "cudaLaunchKernelExC"),
    ("exc_ptsz", "cudaLaunchKernelExC_ptsz"),
    ("coop", "cudaLaunchCooperativeKernel"),
    ("coop_ptsz", "cudaLaunchCooperativeKernel_ptsz"),
];
pub const DRIVER_KERNEL_PATHS: [(&str, &str); 6] = [
    ("cu", "cuLaunchKernel"),
    ("cu_ptsz", "cuLaunchKernel_ptsz"),
    ("ex", "cuLaunchKernelEx"),
    ("ex_ptsz", "cuLaunchKernelEx_ptsz"),
    ("coop", "cuLaunchCooperativeKernel"),
    ("coop_ptsz", "cuLaunchCooperativeKernel_ptsz"),
];

/// The quota most tests run under: small enough to fill with a few blocks.
pub const Q32: &str = "32MiB";

/// What one run of a client left behind.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The fake runtime's log of every call it received.
    pub calls: Vec<String>,
    /// Trace files written, by pid.
    pub traces: HashMap<u32, Value>,
    pub dir: tempfile::TempDir,
}

impl Run {
    /// The line the client printed for step `prefix` (for example "malloc a").
    pub fn line(&self, prefix: &str) -> &str {
        let wanted = format!("{prefix} ");
        self.stdout
            .lines()
            .find(|l| l.starts_with(&wanted))
            .unwrap_or_else(|| {
                panic!(
                    "no line {prefix:?} in:\n{}\nstderr:\n{}",
                    self.stdout, self.stderr
                )
            })
    }

    /// A `key=value` field of that line.
    pub fn field(&self, prefix: &str, key: &str) -> String {
        let line = self.line(prefix);
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
            .to_string()
    }

    pub fn rc(&self, prefix: &str) -> i32 {
        self.field(prefix, "rc").parse().unwrap()
    }

    pub fn number(&self, prefix: &str, key: &str) -> u64 {
        self.field(prefix, key).parse().unwrap()
    }

    /// Every `cudaMemGetInfo` answer the client printed, as (free, total).
    pub fn meminfo(&self) -> Vec<(u64, u64)> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with("meminfo rc=0 "))
            .map(|l| {
                let field = |key: &str| -> u64 {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                (field("free="), field("total="))
            })
            .collect()
    }

    /// The only trace written (panics if there is not exactly one).
    pub fn trace(&self) -> &Value {
        assert_eq!(
            self.traces.len(),
            1,
            "traces: {:?}\nstderr:\n{}",
            self.traces.keys(),
            self.stderr
        );
        self.traces.values().next().unwrap()
    }

    /// The spill tier's counters in the trace of the run's first process.
    pub fn moves(&self) -> &Value {
        &self.trace()["processes"][0]["moves"]
    }

    /// The calls of `kind` ("hook", "cuda": the shim's own CUDA calls; any
    /// if `None`) whose name `name` accepts, as the trace counts the hooks'
    /// costs.
    pub fn host_calls(&self, kind: Option<&str>, name: impl Fn(&str) -> bool) -> u64 {
        self.moves()["host_calls"]
            .as_array()
            .expect("host_calls")
            .iter()
            .filter(|call| kind.is_none_or(|kind| call["kind"] == kind))
            .filter(|call| name(call["name"].as_str().unwrap()))
            .map(|call| call["calls"].as_u64().unwrap())
            .sum()
    }

    /// The last sample of the trace's moves (the one taken at exit, which
    /// holds the totals).
    pub fn last_sample(&self) -> &Value {
        let samples = self.moves()["samples"].as_array();
        samples
            .and_then(|s| s.last())
            .expect("samples of the moves")
    }

    /// Calls the fake runtime received whose line contains every word given.
    pub fn calls_with(&self, words: &[&str]) -> Vec<&String> {
        self.calls
            .iter()
            .filter(|c| words.iter().all(|w| c.split_whitespace().any(|x| x == *w)))
            .collect()
    }

    /// The trace's allocations in order, as (api, placement).
    pub fn allocations(&self) -> Vec<(String, String)> {
        self.events("alloc")
            .iter()
            .map(|e| {
                (
                    e["api"].as_str().unwrap().to_string(),
                    e["placement"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The trace's events of `op` in order.
    pub fn events(&self, op: &str) -> Vec<Value> {
        self.trace()["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["op"] == op)
            .cloned()
            .collect()
    }

    pub fn assert_ok(&self) {
        assert!(
            self.status.success(),
            "client failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// Runs `program` (a file in `dir`) with `args` under the shim, with the
/// given variables on top of a clean environment (no VRAMSHARE_* inherited).
pub fn run_in(
    dir: &Path,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    preload: bool,
) -> Run {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("calls.log");
    let mut command = Command::new(dir.join(program));
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("VRAMSHARE_") || key.starts_with("FAKE_CUDA_") || key == "LD_PRELOAD" {
            command.env_remove(key);
        }
    }
    command.env("FAKE_CUDA_LOG", &log);
    // Blocks over the quota are read in place unless a test turns the spill
    // tier's moves on (tests/tier.rs does).
    command.env("VRAMSHARE_MOVES", "off");
    // The shared registry and ring of this run alone.
    command.env("VRAMSHARE_DIR", work.path().join("shm"));
    command.env("VRAMSHARE_TRACE", work.path().join("trace-%p.json"));
    if preload {
        command.env("LD_PRELOAD", shim_library());
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run client");
    collect(output, work, &log)
}

pub fn collect(output: std::process::Output, work: tempfile::TempDir, log: &Path) -> Run {
    let calls = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let mut traces = HashMap::new();
    for entry in std::fs::read_dir(work.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(pid) = name
            .strip_prefix("trace-")
            .and_then(|n| n.strip_suffix(".json"))
        {
            let text = std::fs::read_to_string(&path).unwrap();
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{name} is not JSON ({e}):\n{text}"));
            traces.insert(pid.parse().unwrap(), value);
        }
    }
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        calls,
        traces,
        dir: work,
    }
}

/// The test client on the fake runtime under the shim, with `shm` as its
/// shared folder and the given variables (none inherited), its output
/// piped: to spawn, or to redirect first.
pub fn client_command(shm: &Path, env: &[(&str, &str)], steps: &[&str]) -> Command {
    let mut command = Command::new(fake_dir(Runtime::Fake13).join("client"));
    for (key, _) in std::env::vars() {
        if key.starts_with("VRAMSHARE_") || key.starts_with("FAKE_CUDA_") {
            command.env_remove(key);
        }
    }
    command
        .args(steps)
        .env("LD_PRELOAD", shim_library())
        .env("VRAMSHARE_DIR", shm)
        .env("VRAMSHARE_MOVES", "off")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// Runs the test client on a fake runtime under the shim.
pub fn client(runtime: Runtime, env: &[(&str, &str)], steps: &[&str]) -> Run {
    run_in(fake_dir(runtime), "client", steps, env, true)
}

/// Runs the driver API's test client (linked against libcuda.so.1) on the
/// fake driver under the shim.
pub fn driver_client(env: &[(&str, &str)], steps: &[&str]) -> Run {
    run_in(fake_dir(Runtime::Fake13), "driver_client", steps, env, true)
}

/// The unmaps made while a queued or running kernel pointed into the range.
pub fn busy_unmaps(run: &Run) -> Vec<&String> {
    run.calls_with(&["cuMemUnmap"])
        .into_iter()
        .filter(|c| log_field(c, "busy") != "0")
        .collect()
}

/// The value of `key=value` in a line of the fake runtime's log.
pub fn log_field(line: &str, key: &str) -> String {
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_string()
}

/// Asserts that each block's `peekvia` step (a kernel reading it) found its
/// first and last bytes equal to the byte given, as (name, byte).
pub fn peeks_hold(run: &Run, expected: &[(&str, &str)]) {
    for (name, byte) in expected {
        let line = run.line(&format!("peekvia {name}"));
        assert_eq!(log_field(line, "first"), *byte, "{line}");
        assert_eq!(log_field(line, "last"), *byte, "{line}");
    }
}

/// Asserts that the bytes the last `copyout` brought to the host (the
/// `hostbytes` step) begin and end with `byte`.
pub fn copied_bytes_hold(run: &Run, byte: &str) {
    let line = run.line("hostbytes");
    assert_eq!(log_field(line, "first"), byte, "{line}");
    assert_eq!(log_field(line, "last"), byte, "{line}");
}

/// The blocks a stress client printed as still live, sorted.
pub fn live_blocks(stdout: &str) -> Vec<(u64, u64)> {
    let mut live: Vec<(u64, u64)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("live "))
        .map(|l| {
            let (ptr, size) = l.split_once(' ').unwrap();
            (hex(ptr), size.parse().unwrap())
        })
        .collect();
    live.sort();
    live
}

/// The blocks a trace lists as leaked (not freed by exit), sorted.
pub fn leaked_blocks(trace: &Value) -> Vec<(u64, u64)> {
    let mut leaked: Vec<(u64, u64)> = trace["processes"][0]["leaked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (hex(l["ptr"].as_str().unwrap()), l["size"].as_u64().unwrap()))
        .collect();
    leaked.sort();
    leaked
}

pub fn hex(ptr: &str) -> u64 {
    u64::from_str_radix(ptr.trim_start_matches("0x"), 16).unwrap()
}

/// NVIDIA's runtime from PyPI's `nvidia-cuda-runtime` wheel, unpacked by
/// `scripts/fetch-cuda-runtime` (or where `VRAMSHARE_CUDA_RUNTIME` points).
/// Missing: the test is skipped with a notice, unless
/// `VRAMSHARE_REQUIRE_REAL_CUDART` is set (as in CI), where it fails.
pub fn nvidia_runtime() -> Option<PathBuf> {
    let root = std::env::var_os("VRAMSHARE_CUDA_RUNTIME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nvidia-cuda-runtime")
        });
    let cu13 = root.join("nvidia/cu13");
    if cu13.join("lib/libcudart.so.13").exists() {
        return Some(cu13);
    }
    let message = format!(
        "NVIDIA's libcudart.so.13 is not at {}: run scripts/fetch-cuda-runtime",
        cu13.display()
    );
    if std::env::var_os("VRAMSHARE_REQUIRE_REAL_CUDART").is_some() {
        panic!("{message}");
    }
    skipped(&message);
    None
}

/// Says that the calling test is skipped, and why. The harness captures what
/// a passing test prints with `eprintln!` and never shows it, so the line
/// goes to stderr directly, whole, in one write; libtest names each test's
/// thread after the test.
pub fn skipped(why: &str) {
    use std::io::Write;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("skipped: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The first of `names` found in a folder of `PATH`.
pub fn on_path(names: &[&str]) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).find_map(|dir| {
            names
                .iter()
                .map(|name| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
    })
}

/// The first of `names` on `PATH`. Missing: the test is skipped with a
/// notice naming `package`, unless the variable `required` is set (as in
/// CI), where it fails.
pub fn installed(names: &[&str], package: &str, required: &str) -> Option<PathBuf> {
    let found = on_path(names);
    if found.is_none() {
        let message = format!("{} is not installed (apt-get install {package})", names[0]);
        if std::env::var_os(required).is_some() {
            panic!("{message}");
        }
        skipped(&message);
    }
    found
}

/// Three blocks of 4 MiB under a quota of 8 MiB, filled in turn (with 1,
/// 2, 3) on stream 1: two fill the quota and the third, in host memory,
/// comes in while their kernels may still be queued, one of them going out
/// to make room.
pub const THIRD_COMES_IN: [&str; 6] = [
    "malloc:a:4M",
    "malloc:b:4M",
    "malloc:c:4M",
    "fill:a:1:1",
    "fill:b:2:1",
    "fill:c:3:1",
];
