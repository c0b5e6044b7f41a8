//! Every decision of the shim becomes an [`Event`]: kept in memory and written
//! as the `vramshare-trace/1` JSON at exit when `VRAMSHARE_TRACE` names a file.
//!
//! `Event` is plain fixed-size data (`#[repr(C)]`, no pointers into the
//! process) so that it can be copied unchanged into a shared-memory ring.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::hooks::Api;

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc = 0,
    Free = 1,
    Promote = 2,
    /// Part of the schema; made once quotas can be cut while a job runs.
    #[allow(dead_code)]
    Demote = 3,
    /// Over quota with spill off, or the runtime's own failure.
    Reject = 4,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Alloc => "alloc",
            Op::Free => "free",
            Op::Promote => "promote",
            Op::Demote => "demote",
            Op::Reject => "reject",
        }
    }
}

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Device = 0,
    /// Managed memory placed on the host and mapped for the device.
    Host = 1,
    /// A pointer the shim never handed out.
    Unknown = 2,
}

impl Placement {
    pub fn name(self) -> Option<&'static str> {
        match self {
            Placement::Device => Some("device"),
            Placement::Host => Some("host"),
            Placement::Unknown => None,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub seq: u64,
    /// `CLOCK_MONOTONIC`, comparable between processes of one machine.
    pub t_ns: u64,
    pub ptr: u64,
    pub size: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    /// The `cudaError_t` the caller got.
    pub rc: i32,
    pub op: Op,
    pub api: Api,
    pub placement: Placement,
    pub _reserved: [u8; 5],
}

/// Events kept in memory; past the cap they are counted, not kept, so that a
/// job making millions of allocations does not grow without bound.
pub struct TraceLog {
    events: Mutex<Vec<Event>>,
    seq: AtomicU64,
    dropped: AtomicU64,
}

pub const MAX_EVENTS: usize = 1 << 20;

impl Default for TraceLog {
    fn default() -> Self {
        Self { events: Mutex::new(Vec::new()), seq: AtomicU64::new(0), dropped: AtomicU64::new(0) }
    }
}

pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl TraceLog {
    #[allow(clippy::too_many_arguments)]
    pub fn record(&self, pid: u32, op: Op, api: Api, device: i32, ptr: usize, size: u64, placement: Placement, rc: i32) {
        let event = Event {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            t_ns: monotonic_ns(),
            ptr: ptr as u64,
            size,
            pid,
            // SAFETY: gettid cannot fail.
            tid: unsafe { libc::gettid() } as u32,
            device,
            rc,
            op,
            api,
            placement,
            _reserved: [0; 5],
        };
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() < MAX_EVENTS {
            events.push(event);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> (Vec<Event>, u64) {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (events, self.dropped.load(Ordering::Relaxed))
    }
}

// ---- The JSON form (schema `vramshare-trace/1`) ----

pub const SCHEMA: &str = "vramshare-trace/1";

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct EventJson {
    pub seq: u64,
    pub t_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    pub op: String,
    pub api: String,
    pub ptr: String,
    pub size: u64,
    pub placement: Option<String>,
    pub rc: i32,
}

impl From<&Event> for EventJson {
    fn from(e: &Event) -> Self {
        EventJson {
            seq: e.seq,
            t_ns: e.t_ns,
            pid: e.pid,
            tid: e.tid,
            device: e.device,
            op: e.op.name().to_string(),
            api: e.api.name().to_string(),
            ptr: format!("{:#x}", e.ptr),
            size: e.size,
            placement: e.placement.name().map(str::to_string),
            rc: e.rc,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct Counts {
    pub allocations: u64,
    pub spills: u64,
    pub promotions: u64,
    pub rejections: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct LeakJson {
    pub ptr: String,
    pub size: u64,
    pub device: u32,
    pub placement: String,
    pub api: String,
}

/// Per-device maps are keyed by the device ordinal as a string, as in JSON.
pub type PerDevice = std::collections::BTreeMap<String, u64>;

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ProcessJson {
    pub pid: u32,
    pub cmdline: String,
    pub quota: PerDevice,
    pub spill: String,
    pub peak_device: PerDevice,
    pub peak_spilled: PerDevice,
    /// Bytes still held at exit.
    pub device_in_use: PerDevice,
    pub spilled_in_use: PerDevice,
    pub counts: std::collections::BTreeMap<String, Counts>,
    pub leaked: Vec<LeakJson>,
    pub events_dropped: u64,
    /// The runtime library the shim called, and its version.
    pub runtime: String,
    pub runtime_version: i32,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct TraceJson {
    pub schema: String,
    /// Processes of one job (one `VRAMSHARE_JOB`) share a trace file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub processes: Vec<ProcessJson>,
    pub events: Vec<EventJson>,
}

impl TraceJson {
    /// Adds another process's trace to this one (same job, same file).
    pub fn merge(&mut self, other: TraceJson) {
        self.processes.extend(other.processes);
        self.events.extend(other.events);
        self.events.sort_by_key(|e| (e.t_ns, e.pid, e.seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_is_plain_fixed_size_data() {
        assert_eq!(std::mem::size_of::<Event>(), 56);
        assert_eq!(std::mem::align_of::<Event>(), 8);
    }

    #[test]
    fn events_past_the_cap_are_counted() {
        let log = TraceLog::default();
        for _ in 0..MAX_EVENTS + 3 {
            log.record(1, Op::Alloc, Api::cudaMalloc, 0, 0x10, 8, Placement::Device, 0);
        }
        let (events, dropped) = log.snapshot();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(dropped, 3);
        assert_eq!(events[5].seq, 5);
    }

    #[test]
    fn json_form_of_an_event() {
        let log = TraceLog::default();
        log.record(42, Op::Alloc, Api::cudaMallocAsync, 1, 0x7f00, 4096, Placement::Host, 0);
        let (events, _) = log.snapshot();
        let json = serde_json::to_value(EventJson::from(&events[0])).unwrap();
        assert_eq!(json["op"], "alloc");
        assert_eq!(json["api"], "cudaMallocAsync");
        assert_eq!(json["ptr"], "0x7f00");
        assert_eq!(json["placement"], "host");
        assert_eq!(json["device"], 1);
        assert_eq!(json["pid"], 42);
    }
}
