//! Writing the process's trace as JSON at exit (`VRAMSHARE_TRACE`).
//!
//! `%p` in the path becomes the pid, so every process gets its own file.
//! Without `%p`, the processes of one job share the file: each merges its
//! part in under an `flock`, and a file left by an earlier job (another
//! `VRAMSHARE_JOB`) is replaced rather than merged into.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering;

use crate::config::{Quota, Spill, MAX_DEVICES};
use crate::state::{config, State, QUOTA_NONE, QUOTA_UNRESOLVED};
use vramshare_common::trace_json::{
    Counts, EventJson, LeakJson, PerDevice, ProcessJson, TraceJson,
};

/// The variable that ties the processes of one job together.
pub const JOB_VARIABLE: &str = "VRAMSHARE_JOB";

pub fn trace_path(template: &str, pid: u32) -> String {
    template.replace("%p", &pid.to_string())
}

pub fn process_summary(state: &State) -> ProcessJson {
    let config = config();
    let mut quota = PerDevice::new();
    for device in 0..MAX_DEVICES as u32 {
        match state.cached_quota(device) {
            QUOTA_NONE => {}
            QUOTA_UNRESOLVED => {
                if let (Quota::PerDevice(_), Some(crate::config::Limit::Bytes(b))) =
                    (&config.quota, config.quota.for_device(device))
                {
                    quota.insert(device.to_string(), b);
                }
            }
            bytes => {
                quota.insert(device.to_string(), bytes);
            }
        }
    }
    let (mut peak_device, mut peak_spilled, mut device_in_use, mut spilled_in_use) = (
        PerDevice::new(),
        PerDevice::new(),
        PerDevice::new(),
        PerDevice::new(),
    );
    let mut counts = BTreeMap::new();
    for (device, usage) in state.ledger.active_devices() {
        let key = device.to_string();
        peak_device.insert(key.clone(), usage.peak_device.load(Ordering::Relaxed));
        peak_spilled.insert(key.clone(), usage.peak_spilled.load(Ordering::Relaxed));
        device_in_use.insert(key.clone(), usage.device_bytes.load(Ordering::Relaxed));
        spilled_in_use.insert(key.clone(), usage.spilled_bytes.load(Ordering::Relaxed));
        counts.insert(
            key,
            Counts {
                allocations: usage.allocations.load(Ordering::Relaxed),
                spills: usage.spills.load(Ordering::Relaxed),
                promotions: usage.promotions.load(Ordering::Relaxed),
                rejections: usage.rejections.load(Ordering::Relaxed),
            },
        );
    }
    let leaked = state
        .ledger
        .live_blocks()
        .into_iter()
        .map(|(ptr, block)| LeakJson {
            ptr: format!("{ptr:#x}"),
            size: block.size,
            device: block.device,
            placement: block.placement.name().to_string(),
            api: block.api.name().to_string(),
        })
        .collect();
    ProcessJson {
        pid: state.pid,
        cmdline: vramshare_common::process::cmdline(state.pid),
        quota,
        spill: match config.spill {
            Spill::Host => "host",
            Spill::Off => "off",
        }
        .to_string(),
        peak_device,
        peak_spilled,
        device_in_use,
        spilled_in_use,
        counts,
        leaked,
        events_dropped: state.trace.as_ref().map_or(0, |t| t.dropped()),
        // The libraries the process loaded itself (nothing is loaded here).
        runtime: cudart_sys::loaded_object_named("libcudart.so")
            .or_else(|| cudart_sys::loaded_object_named("libcuda.so."))
            .unwrap_or_default(),
        // Asked on first use of each device; never asked here, at exit, when
        // the runtime may already be shutting down.
        runtime_version: state.runtime_version.load(Ordering::Relaxed),
    }
}

pub fn trace_json(state: &State, job: Option<String>) -> TraceJson {
    let events = state
        .trace
        .as_ref()
        .map(|t| t.snapshot().0)
        .unwrap_or_default();
    TraceJson {
        job,
        ..TraceJson::new(
            vec![process_summary(state)],
            events.iter().map(EventJson::from).collect(),
        )
    }
}

pub fn write_trace_at_exit(state: &State) {
    let Some(template) = &config().trace else {
        return;
    };
    let path = trace_path(template, state.pid);
    let shared = !template.contains("%p");
    let job = shared.then(|| std::env::var(JOB_VARIABLE).ok()).flatten();
    let trace = trace_json(state, job);
    let result = if shared {
        merge_into(&path, trace)
    } else {
        write_new(&path, &trace)
    };
    match result {
        Ok(()) => info!("trace written to {path}"),
        Err(error) => error!("cannot write the trace to {path}: {error}"),
    }
}

fn write_new(path: &str, trace: &TraceJson) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    serde_json::to_writer(&mut file, trace)?;
    file.write_all(b"\n")
}

/// Adds this process's trace to a file that other processes of the same job
/// may be writing too.
fn merge_into(path: &str, mut trace: TraceJson) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)?;
    // SAFETY: flock on a descriptor we own; released when the file closes.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut existing = String::new();
    file.read_to_string(&mut existing)?;
    if let Ok(mut earlier) = TraceJson::parse(&existing) {
        if earlier.job.is_some() && earlier.job == trace.job {
            earlier.merge(trace);
            trace = earlier;
        }
    }
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    serde_json::to_writer(&mut file, &trace)?;
    file.write_all(b"\n")
}
