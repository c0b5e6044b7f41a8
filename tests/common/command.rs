//! The `vramshare` command's own harness, for its tests (cli.rs, cli_files.rs,
//! cli_robust.rs):
//! each includes it with `#[path = "common/command.rs"] mod command;` beside
//! `mod common;`. It is not part of `common` because it runs the command's
//! binary, which cargo names (`CARGO_BIN_EXE_vramshare`) only to the tests of
//! the package that builds it, not to the shim's.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

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
