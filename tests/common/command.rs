//! The `vramshare` command's own harness, for its tests (cli.rs, cli_files.rs):
//! each includes it with `#[path = "common/command.rs"] mod command;` beside
//! `mod common;`. It is not part of `common` because it runs the command's
//! binary, which cargo names (`CARGO_BIN_EXE_vramshare`) only to the tests of
//! the package that builds it, not to the shim's.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

pub fn vramshare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(args)
        .env("VRAMSHARE_LIB", shim_library())
        .env_remove("VRAMSHARE_DIR")
        .output()
        .unwrap()
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
