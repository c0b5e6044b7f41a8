//! `vramshare dump`: the shared trace ring as `vramshare-trace/1` JSON.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use vramshare_common::files::open_existing;
use vramshare_common::registry::ProcessInfo;
use vramshare_common::ring::{Cursor, Ring, RingFile};
use vramshare_common::trace_json::{EventJson, ProcessJson, TraceJson};

use crate::out::Failure;

/// A live process's summary from its registry slot (no leaks: it still runs).
fn process_json(info: &ProcessInfo) -> ProcessJson {
    ProcessJson {
        pid: info.pid,
        cmdline: info.cmdline.clone(),
        spill: info.spill.name().to_string(),
        ..ProcessJson::default()
    }
    .with_devices(&info.devices)
}

pub fn dump(dir: &Path, pid: Option<u32>, output: Option<&Path>) -> Result<ExitCode, Failure> {
    let trace = ring_trace(dir, pid)?;
    let text = serde_json::to_string_pretty(&trace).map_err(|e| e.to_string())?;
    match output {
        Some(path) => std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => crate::out::print(&(text + "\n"))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The shared ring's events (of `pid`, or all) and their processes, as a
/// trace.
pub fn ring_trace(dir: &Path, pid: Option<u32>) -> Result<TraceJson, Failure> {
    let map = open_existing::<RingFile>(dir).map_err(|e| e.to_string())?;
    let ring = Ring::new(map).map_err(|why| format!("{}: {why}", dir.join("ring").display()))?;
    let mut cursor = Cursor::oldest(&ring);
    let overwritten_before = cursor.next;
    let mut events = Vec::new();
    cursor.drain(&ring, &mut events, true);
    events.retain(|e| pid.is_none_or(|p| e.pid == p));

    // Processes: the live ones from the registry; for each other pid with
    // events, the registry's record of it after it exited if the slot is
    // still there (the latest one registered before its first event, in case
    // the pid was reused), or else a bare entry. A process uses the ring
    // only together with the registry, so a ring without a usable registry
    // means a damaged folder: refused, as by the other subcommands, rather
    // than dumped with every process left bare.
    let registry = crate::ps::registry(dir)?;
    let live = registry.live();
    let gone = registry.gone();
    let mut processes: Vec<ProcessJson> = live
        .iter()
        .filter(|p| pid.is_none_or(|want| p.pid == want))
        .map(process_json)
        .collect();
    let known: BTreeSet<u32> = processes.iter().map(|p| p.pid).collect();
    let others: BTreeSet<u32> = events
        .iter()
        .map(|e| e.pid)
        .filter(|p| !known.contains(p))
        .collect();
    for other in others {
        let first_event = events
            .iter()
            .filter(|e| e.pid == other)
            .map(|e| e.t_ns)
            .min()
            .unwrap_or(u64::MAX);
        let record = gone
            .iter()
            .filter(|g| g.pid == other && g.registered_ns <= first_event)
            .max_by_key(|g| g.registered_ns);
        processes.push(record.map(process_json).unwrap_or(ProcessJson {
            pid: other,
            ..ProcessJson::default()
        }));
    }

    Ok(TraceJson {
        events_lost: Some(overwritten_before + cursor.lost),
        ..TraceJson::new(processes, events.iter().map(EventJson::from).collect())
    })
}
