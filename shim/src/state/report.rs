//! Writing the process's trace as JSON at exit (`VRAMSHARE_TRACE`).
//!
//! `%p` in the path becomes the pid, so every process gets its own file.
//! Without `%p`, the processes of one job share the file: each merges its
//! part in under an `flock`, and a file left by an earlier job (another
//! `VRAMSHARE_JOB`) is replaced rather than merged into.
//!
//! The target must be a regular file (or not exist yet), and not one the
//! process writes already through its standard streams:
//! `VRAMSHARE_TRACE=/dev/stdout` would otherwise truncate the job's own
//! output when it goes to a file, and a pipe, FIFO or `/dev/full` would
//! hang or fail the exit. Checked when the library loads (a bad target
//! stops the job there, as any malformed variable), and again at exit.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use crate::config::{Limit, Quota};
use crate::state::access::replay::{describe, Miss};
use crate::state::{config, State, QUOTA_UNRESOLVED};
use vramshare_common::trace_json::{
    CoverageJson, EventJson, LeakJson, ProcessJson, ReplayMiss, StepPeakJson, TraceJson,
};

/// The variable that ties the processes of one job together.
pub const JOB_VARIABLE: &str = "VRAMSHARE_JOB";

pub fn trace_path(template: &str, pid: u32) -> String {
    template.replace("%p", &pid.to_string())
}

/// The forms `VRAMSHARE_TRACE` accepts, for messages.
pub const TRACE_FORMS: &str = "the path of a regular file (made if missing; not the job's own standard output or error); %p in it becomes the pid";

/// Why the trace cannot go to a file of this kind, if it cannot.
fn refused(metadata: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if !metadata.file_type().is_file() {
        let kind = vramshare_common::files::kind(metadata.file_type());
        return Some(format!("{kind}, not a regular file"));
    }
    // Not standard input: a process that reads the trace of an earlier
    // run (`jq . < trace.json`) has nothing to lose to it.
    (1..3).find_map(|fd| {
        // SAFETY: fstat writes into a stat we own; a closed fd fails.
        let mut stream: libc::stat = unsafe { std::mem::zeroed() };
        let same = unsafe { libc::fstat(fd, &mut stream) } == 0
            && stream.st_dev == metadata.dev()
            && stream.st_ino == metadata.ino();
        same.then(|| {
            let name = ["input", "output", "error"][fd as usize];
            format!("the process's standard {name}: the trace would overwrite it")
        })
    })
}

/// Checks the trace target of this process: `Err` says why it is refused.
pub fn check_target(path: &str) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(metadata) => refused(&metadata).map_or(Ok(()), Err),
        Err(_) => Ok(()),
    }
}

pub fn process_summary(state: &State) -> ProcessJson {
    let config = config();
    let devices: Vec<_> = state
        .ledger
        .active_devices()
        .map(|(device, counters)| (device, counters.snapshot()))
        .collect();
    let leaked = state
        .ledger
        .live_blocks()
        .into_iter()
        .map(|(ptr, block)| LeakJson {
            ptr: format!("{ptr:#x}"),
            size: block.size,
            device: block.device.number(),
            placement: block.placement.name().to_string(),
            api: block.api.name().to_string(),
        })
        .collect();
    let by_api = state.launches_by_api();
    let mut summary = ProcessJson {
        pid: state.pid,
        cmdline: vramshare_common::process::cmdline(state.pid),
        spill: config.spill.name().to_string(),
        leaked,
        events_dropped: state.trace.as_ref().map_or(0, |t| t.dropped()),
        // The libraries the process loaded itself (nothing is loaded here).
        runtime: cudart_sys::loaded_object_named("libcudart.so")
            .or_else(|| cudart_sys::loaded_object_named("libcuda.so."))
            .unwrap_or_default(),
        // Asked on first use of each device; never asked here, at exit, when
        // the runtime may already be shutting down.
        runtime_version: crate::cuda::backend::runtime_version(),
        launches: by_api
            .iter()
            .filter(|(api, _)| api.is_launch())
            .map(|(api, count)| (api.name().to_string(), *count))
            .collect(),
        library_calls: by_api
            .iter()
            .filter(|(api, _)| api.is_library_call())
            .map(|(api, count)| (api.name().to_string(), *count))
            .collect(),
        copies: by_api
            .iter()
            .filter(|(api, _)| api.is_copy())
            .map(|(api, count)| (api.name().to_string(), *count))
            .collect(),
        coverage: state
            .launches_by_attribution()
            .into_iter()
            .map(|(api, [named, unnamed, undecoded, in_library])| {
                let coverage = CoverageJson {
                    named,
                    unnamed,
                    undecoded,
                    in_library,
                };
                (api.name().to_string(), coverage)
            })
            .collect(),
        access: super::access::report::access_json(state),
        moves: moves_json(state),
        pools: Some(super::lock(&state.pool_growths).clone())
            .filter(|p| p.growths > 0 || !p.over_quota.is_empty()),
        ..ProcessJson::default()
    }
    .with_devices(&devices);
    // Quotas of listed devices the process never used (resolved ones are in
    // the counters already).
    if let Quota::PerDevice(list) = &config.quota {
        for (device, limit) in list {
            // Parsing keeps device numbers below the devices supported.
            let Some(known) = crate::config::Device::new(*device) else {
                continue;
            };
            if let (Limit::Bytes(bytes), QUOTA_UNRESOLVED) = (limit, state.cached_quota(known)) {
                summary.quota.insert(device.to_string(), *bytes);
            }
        }
    }
    summary
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

/// Opens the trace target without blocking (a FIFO would otherwise wait
/// for a reader forever) and without truncating it, and refuses what is
/// not a regular file of its own.
fn open_target(path: &str) -> std::io::Result<std::fs::File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    match refused(&file.metadata()?) {
        Some(why) => Err(std::io::Error::other(format!("refused: it is {why}"))),
        None => Ok(file),
    }
}

fn write_new(path: &str, trace: &TraceJson) -> std::io::Result<()> {
    let mut file = open_target(path)?;
    file.set_len(0)?;
    serde_json::to_writer(&mut file, trace)?;
    file.write_all(b"\n")
}

/// Adds this process's trace to a file that other processes of the same job
/// may be writing too.
fn merge_into(path: &str, mut trace: TraceJson) -> std::io::Result<()> {
    let mut file = open_target(path)?;
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

/// The spill tier's moves and what the shim's hooks cost, once the tier
/// has had a block: a job whose blocks never moved still shows where its
/// hooks' time went.
fn moves_json(state: &State) -> Option<vramshare_common::trace_json::MovesJson> {
    use std::sync::atomic::Ordering::Relaxed;
    let tier = &state.tier;
    let (to_device, to_host) = (tier.moves_in.load(Relaxed), tier.moves_out.load(Relaxed));
    // Waits for room are the tier's costs too, with or without moves.
    let waited = tier.free_wait_ns.load(Relaxed) + tier.outgoing.room_wait_ns.load(Relaxed) > 0;
    let (matched, missed, unseen) = state.access.replay.agreement();
    let (host_calls, host_calls_last_step) = crate::cuda::host_costs::by_name();
    let active = tier.active.load(Relaxed);
    (to_device + to_host > 0 || waited || active).then(|| vramshare_common::trace_json::MovesJson {
        to_device,
        to_host,
        bytes_to_device: tier.moved_in.load(Relaxed),
        bytes_to_host: tier.moved_out.load(Relaxed),
        left_in_place: tier.left_in_place.load(Relaxed),
        read_once_in_place: tier.read_once_in_place.load(Relaxed),
        seconds: tier.move_ns.load(Relaxed) as f64 / 1e9,
        drain_seconds: tier.drain_ns.load(Relaxed) as f64 / 1e9,
        copy_seconds: tier.copy_ns.load(Relaxed) as f64 / 1e9,
        remap_seconds: tier.remap_ns.load(Relaxed) as f64 / 1e9,
        memory_seconds: tier.memory_ns.load(Relaxed) as f64 / 1e9,
        pinning_seconds: tier.pinning_ns.load(Relaxed) as f64 / 1e9,
        pinned_bytes: tier.pinned.load(Relaxed),
        unpinned_bytes: tier.unpinned.load(Relaxed),
        pinned_beside_unused_bytes: tier.pinned_beside_unused.load(Relaxed),
        groups_made: tier.groups_made.load(Relaxed),
        grouped_members: tier.grouped_members.load(Relaxed),
        fresh_bytes_to_device: tier.moved_in_fresh.load(Relaxed),
        lent_bytes_to_device: tier.moved_in_lent.load(Relaxed),
        made_with_room_bytes: tier.room_at_birth.load(Relaxed),
        out_before_peak_bytes: tier.out_before_peak.load(Relaxed),
        out_kept_free_bytes: tier.out_kept_free.load(Relaxed),
        out_for_room_bytes: tier.out_for_room.load(Relaxed),
        fetches: tier.fetches.load(Relaxed),
        drains: Some(tier.drains.load(Relaxed)),
        drains_unread: tier.drains_unread.load(Relaxed),
        drains_for_room: tier.drains_for_room.load(Relaxed),
        quiet_entered: tier.quiet_entered.load(Relaxed),
        unrecorded_uses: tier.unrecorded_uses.load(Relaxed),
        drains_quiet: tier.drains_quiet.load(Relaxed),
        mover_moves: tier.outgoing.made.load(Relaxed),
        mover_seconds: tier.outgoing.busy_ns.load(Relaxed) as f64 / 1e9,
        mover_claimed: tier.outgoing.claimed.load(Relaxed),
        mover_copy_seconds: tier.outgoing.copy_ns.load(Relaxed) as f64 / 1e9,
        mover_remap_seconds: tier.outgoing.remap_ns.load(Relaxed) as f64 / 1e9,
        mover_memory_seconds: tier.outgoing.memory_ns.load(Relaxed) as f64 / 1e9,
        mover_claim_wait_seconds: tier.outgoing.claim_wait_ns.load(Relaxed) as f64 / 1e9,
        mover_room_wait_seconds: tier.outgoing.room_wait_ns.load(Relaxed) as f64 / 1e9,
        copier_seconds: tier.outgoing.copier_busy_ns.load(Relaxed) as f64 / 1e9,
        copier_queue_seconds: tier.outgoing.copier_queue_ns.load(Relaxed) as f64 / 1e9,
        free_wait_seconds: tier.free_wait_ns.load(Relaxed) as f64 / 1e9,
        ahead_moves: tier.ahead_moves.load(Relaxed),
        ahead_bytes: tier.ahead_bytes.load(Relaxed),
        replay_matched: matched,
        replay_missed: missed,
        replay_unseen: unseen,
        replay_misses: state
            .access
            .replay
            .last_misses()
            .iter()
            .map(miss_json)
            .collect(),
        steps: state.access.steps.current(),
        step_peaks: state
            .access
            .replay
            .step_peaks()
            .iter()
            .map(|peak| StepPeakJson {
                uses: peak.uses as u64,
                out_needed_bytes: peak.bytes,
                at: peak.at as u64,
            })
            .collect(),
        // The last sample is now: the run's end.
        samples: {
            let mut samples = crate::state::lock(&tier.samples).taken.clone();
            let now = vramshare_common::process::monotonic_ns();
            samples.push(tier.snapshot(now, (matched, missed)));
            samples
        },
        host_calls,
        host_calls_last_step,
    })
}

/// A use the step before did not foretell, as the trace writes it.
fn miss_json(miss: &Miss) -> ReplayMiss {
    ReplayMiss {
        at: miss.at as u64,
        expected: miss.expected.map(describe),
        named: describe(miss.named),
        found_at: miss.found_at.map(|d| d as i64),
    }
}
