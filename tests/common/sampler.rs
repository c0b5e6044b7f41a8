//! Samples a running client's device bytes from the registry, as
//! `vramshare ps` reads them (tests include it with
//! `#[path = "common/sampler.rs"] mod sampler;` beside `mod common;`).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vramshare_common::files::open_existing;
use vramshare_common::registry::{Registry, RegistryFile};

/// What the sampler saw of a run.
pub struct Sampled {
    pub samples: u64,
    pub highest: u64,
}

/// Runs `command` (a client whose shared folder is `shm`; its output
/// dropped: a line a step, unread, would fill a pipe and stop it) and
/// samples device 0's bytes every half millisecond until it exits (two
/// minutes at most); it must exit with success.
pub fn run_sampled(mut command: Command, shm: &Path) -> Sampled {
    let mut child = command.stdout(Stdio::null()).spawn().unwrap();
    let pid = child.id();
    let (mut samples, mut highest) = (0u64, 0u64);
    let began = Instant::now();
    let mut registry = None;
    while child.try_wait().unwrap().is_none() && began.elapsed() < Duration::from_secs(120) {
        if registry.is_none() {
            registry = open_existing::<RegistryFile>(shm)
                .ok()
                .and_then(|map| Registry::new(map).ok());
        }
        if let Some(slot) = registry.as_ref().and_then(|r| r.live_slot(pid)) {
            let bytes = slot.devices()[0]
                .device_bytes
                .load(std::sync::atomic::Ordering::Relaxed);
            highest = highest.max(bytes);
            samples += 1;
        }
        // Leaves the client most of CI's two cores.
        std::thread::sleep(Duration::from_micros(500));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Sampled { samples, highest }
}
