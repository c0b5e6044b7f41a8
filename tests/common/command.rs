//! The `vramshare` command's own harness, for its tests (cli.rs, cli_gpus.rs,
//! cli_files.rs, cli_robust.rs, access.rs):
//! each includes it with `#[path = "common/command.rs"] mod command;` beside
//! `mod common;`. It is not part of `common` because it runs the command's
//! binary, which cargo names (`CARGO_BIN_EXE_vramshare`) only to the tests of
//! the package that builds it, not to the shim's.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// The command with `args`, the shim under test beside it and no
/// `VRAMSHARE_DIR` inherited, to redirect or spawn.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vramshare"));
    command
        .args(args)
        .env("VRAMSHARE_LIB", shim_library())
        .env_remove("VRAMSHARE_DIR");
    command
}

pub fn vramshare(args: &[&str]) -> Output {
    command(args).output().unwrap()
}

/// `vramshare run [OPTIONS] --dir DIR -- client STEPS...`, waited for.
pub fn run_client(dir: &Path, options: &[&str], steps: &[&str]) -> Output {
    let client = client_path();
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--dir", dir.to_str().unwrap(), "--", &client]);
    args.extend_from_slice(steps);
    vramshare(&args)
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn client_path() -> String {
    fake_dir(Runtime::Fake13)
        .join("client")
        .to_str()
        .unwrap()
        .to_string()
}

/// `vramshare run` of the test client, in the background.
pub fn spawn_run(dir: &Path, quota: &str, steps: &[&str]) -> Child {
    spawn_run_with(dir, quota, steps, &[])
}

/// The same, with `env` added to its environment.
pub fn spawn_run_with(dir: &Path, quota: &str, steps: &[&str], env: &[(&str, &str)]) -> Child {
    let client = client_path();
    let mut args = vec![
        "run",
        "--quota",
        quota,
        "--dir",
        dir.to_str().unwrap(),
        "--",
        &client,
    ];
    args.extend_from_slice(steps);
    Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(&args)
        .env("VRAMSHARE_LIB", shim_library())
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

pub fn ps_json(dir: &Path) -> Vec<Value> {
    let out = vramshare(&["ps", "--json", "--dir", dir.to_str().unwrap()]);
    if text(&out.stderr).contains("registry does not exist") {
        return Vec::new(); // the job has not made the files yet
    }
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Polls `ps` until `pid`'s row satisfies `ready` (or panics after 10 s).
pub fn wait_for_row(dir: &Path, pid: u32, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(row) = ps_json(dir)
            .into_iter()
            .find(|r| r["pid"] == pid && ready(r))
        {
            return row;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never showed as expected: {:?}",
            ps_json(dir)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn wait_gone(dir: &Path, pid: u32, within: Duration) {
    let deadline = Instant::now() + within;
    while ps_json(dir).iter().any(|r| r["pid"] == pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} still listed after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
