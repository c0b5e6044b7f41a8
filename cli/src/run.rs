//! `vramshare run`: the job under `LD_PRELOAD`, with the variables set.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

pub struct Options {
    pub quota: Option<String>,
    pub spill: Option<&'static str>,
    pub trace: Option<PathBuf>,
    pub pool: Option<String>,
    pub pool_quota: Option<String>,
    pub priority: Option<&'static str>,
    pub dir: Option<PathBuf>,
    pub command: Vec<String>,
}

/// The shim: `VRAMSHARE_LIB`, else `libvramshare.so` beside this binary.
fn library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("VRAMSHARE_LIB").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("VRAMSHARE_LIB={} is not a file", path.display()))
        };
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let path = exe.with_file_name("libvramshare.so");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build --release`, or set VRAMSHARE_LIB",
            path.display()
        ))
    }
}

/// Replaces this process with the command; returns only if that fails.
pub fn run(options: Options) -> Result<ExitCode, crate::out::Failure> {
    let library = library()?;
    let (program, args) = options.command.split_first().ok_or("no command given")?;
    let mut command = Command::new(program);
    command.args(args);
    let preload = match std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        Some(existing) => {
            let mut joined = library.clone().into_os_string();
            joined.push(":");
            joined.push(existing);
            joined
        }
        None => library.into_os_string(),
    };
    command.env("LD_PRELOAD", preload);
    if let Some(quota) = &options.quota {
        command.env("VRAMSHARE_QUOTA", quota);
    }
    if let Some(spill) = options.spill {
        command.env("VRAMSHARE_SPILL", spill);
    }
    if let Some(trace) = &options.trace {
        command.env("VRAMSHARE_TRACE", trace);
    }
    if let Some(dir) = &options.dir {
        command.env("VRAMSHARE_DIR", dir);
    }
    for (variable, value) in [
        ("VRAMSHARE_POOL", options.pool.as_deref()),
        ("VRAMSHARE_POOL_QUOTA", options.pool_quota.as_deref()),
        ("VRAMSHARE_PRIORITY", options.priority),
    ] {
        if let Some(value) = value {
            command.env(variable, value);
        }
    }
    let error = command.exec();
    crate::out::complain(&format!("cannot run {program}: {error}"));
    // The shell's convention: 127 for a command not found, 126 otherwise.
    Ok(ExitCode::from(
        if error.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}
