//! The pool tests' harness (pools.rs includes it with
//! `#[path = "common/pools.rs"] mod pools;` beside `mod common;`): members
//! started under the shim in a pool, the pool's bytes and members read from
//! the shared files, and the traces the members leave.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use vramshare_common::files::open_existing;
use vramshare_common::pool::{PoolFile, Pools};
use vramshare_common::registry::{Registry, RegistryFile};

use crate::common::*;

/// Starts `program ARGS` from the fake folder under the shim, in pool
/// `pool` with `budget`, sharing `shm`; its trace goes to `shm/../trace-PID.json`.
pub fn spawn_member(shm: &Path, program: &str, args: &[&str], pool: &str, budget: &str) -> Child {
    spawn_member_as(shm, program, args, pool, budget, "normal")
}

pub fn spawn_member_as(
    shm: &Path,
    program: &str,
    args: &[&str],
    pool: &str,
    budget: &str,
    priority: &str,
) -> Child {
    member_command(shm, program, args, pool, budget, priority)
        .spawn()
        .unwrap()
}

/// The command [`spawn_member_as`] runs, to add to.
pub fn member_command(
    shm: &Path,
    program: &str,
    args: &[&str],
    pool: &str,
    budget: &str,
    priority: &str,
) -> Command {
    let dir = fake_dir(Runtime::Fake13);
    let mut command = Command::new(dir.join(program));
    for (key, _) in std::env::vars() {
        if key.starts_with("VRAMSHARE_") || key.starts_with("FAKE_CUDA_") {
            command.env_remove(key);
        }
    }
    command
        .args(args)
        .env("LD_PRELOAD", shim_library())
        .env("VRAMSHARE_DIR", shm)
        .env("VRAMSHARE_POOL", pool)
        .env("VRAMSHARE_POOL_QUOTA", budget)
        .env("VRAMSHARE_PRIORITY", priority)
        // Spilled blocks are managed memory unless a test turns the spill
        // tier's moves on.
        .env("VRAMSHARE_MOVES", "off")
        .env(
            "VRAMSHARE_TRACE",
            shm.parent().unwrap().join("trace-%p.json"),
        )
        .env("FAKE_CUDA_CAPACITY", "4294967296")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Reads pool `name`'s device bytes on device 0 (None until it exists).
pub fn pool_bytes(shm: &Path, name: &str) -> Option<u64> {
    let pools = Pools::new(open_existing::<PoolFile>(shm).ok()?).ok()?;
    pools
        .find(name)
        .map(|(_, pool)| pool.device_bytes(vramshare_common::size::Device::new(0).unwrap()))
}

/// How many live processes have joined a pool (0 before the registry exists).
pub fn joined_members(shm: &Path) -> usize {
    open_existing::<RegistryFile>(shm)
        .ok()
        .and_then(|map| Registry::new(map).ok())
        .map_or(0, |r| r.live().iter().filter(|p| p.pool.is_some()).count())
}

/// Polls `done` every 5 ms until it holds; fails, saying `what` (given the
/// time waited), once `limit` has passed.
pub fn poll_until(
    limit: Duration,
    mut done: impl FnMut() -> bool,
    what: impl Fn(Duration) -> String,
) {
    let start = Instant::now();
    while !done() {
        let waited = start.elapsed();
        assert!(waited < limit, "{}", what(waited));
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (up to 10 s) until pool `name` holds exactly `bytes` on device 0.
pub fn wait_for_pool(shm: &Path, name: &str, bytes: u64) {
    poll_until(
        Duration::from_secs(10),
        || pool_bytes(shm, name) == Some(bytes),
        |_| {
            format!(
                "pool {name} never held {bytes} bytes: {:?}",
                pool_bytes(shm, name)
            )
        },
    );
}

/// Samples the pool as fast as it can until `stop`, keeping the highest value.
pub fn sample_until(shm: &Path, name: &str, stop: &AtomicBool, highest: &AtomicU64) {
    while !stop.load(Ordering::Acquire) {
        if let Some(bytes) = pool_bytes(shm, name) {
            highest.fetch_max(bytes, Ordering::Relaxed);
        }
    }
}

/// The trace a member wrote at exit.
pub fn member_trace(shm: &Path, pid: u32) -> Value {
    let path = shm.parent().unwrap().join(format!("trace-{pid}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// (op, api, size in MiB, placement) of every event.
pub fn moves(trace: &Value) -> Vec<(String, String, u64, String)> {
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap().to_string(),
                e["api"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap() / MIB,
                e["placement"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The tests here time what other processes do (within a second, within
/// 250 ms): they run one at a time, so that a loaded machine (CI has two
/// cores) does not starve one of them.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
