//! Every decision of the shim becomes an [`Event`]: kept in memory and written
//! as the `vramshare-trace/1` JSON at exit when `VRAMSHARE_TRACE` names a file.
//!
//! `Event` is plain fixed-size data (`#[repr(C)]`, no pointers into the
//! process) so that it can be copied unchanged into a shared-memory ring.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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

/// Events kept in memory, in slots claimed with one atomic increment: no
/// lock on the allocation path. The slots are zeroed memory from the kernel,
/// so the pages of the 1M-event cap cost nothing until events reach them.
/// Past the cap, events are counted, not kept, so that a job making millions
/// of allocations does not grow without bound.
pub struct TraceLog {
    /// The process the events belong to.
    pid: u32,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    dropped: AtomicU64,
}

struct Slot {
    /// Set once `event` is fully written.
    written: AtomicBool,
    event: UnsafeCell<MaybeUninit<Event>>,
}

// SAFETY: each slot is written by the one thread that claimed its index, and
// read only after `written` is set (release/acquire).
unsafe impl Sync for Slot {}

pub const MAX_EVENTS: usize = 1 << 20;

impl TraceLog {
    pub fn new(pid: u32) -> Self {
        let layout = Layout::array::<Slot>(MAX_EVENTS).expect("slot array layout");
        // SAFETY: all-zero bytes are a valid `Slot` (false, uninitialised
        // event); the box is freed with the same layout.
        let slots = unsafe {
            let ptr = std::alloc::alloc_zeroed(layout) as *mut Slot;
            if ptr.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            advise_huge_pages(ptr as usize, layout.size());
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, MAX_EVENTS))
        };
        Self {
            pid,
            slots,
            next: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

/// Asks for transparent huge pages over the slot array: the pages are
/// touched one after another as events arrive, and one fault per 2 MiB costs
/// far less than one per 4 KiB on the allocation path. Only a hint.
fn advise_huge_pages(start: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    let first = start.next_multiple_of(HUGE);
    let end = (start + len) / HUGE * HUGE;
    if end > first {
        // SAFETY: the range lies inside the allocation we own.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

/// The kernel's id of the calling thread, asked once per thread (it is a
/// system call, and this is on every allocation's path).
fn thread_id() -> u32 {
    thread_local! {
        static TID: u32 = unsafe { libc::gettid() } as u32;
    }
    // During thread teardown the cache may be gone: ask the kernel.
    TID.try_with(|tid| *tid)
        .unwrap_or_else(|_| unsafe { libc::gettid() } as u32)
}

pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl TraceLog {
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        op: Op,
        api: Api,
        device: i32,
        ptr: usize,
        size: u64,
        placement: Placement,
        rc: i32,
    ) {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = self.slots.get(index) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let event = Event {
            seq: index as u64,
            t_ns: monotonic_ns(),
            ptr: ptr as u64,
            size,
            pid: self.pid,
            tid: thread_id(),
            device,
            rc,
            op,
            api,
            placement,
            _reserved: [0; 5],
        };
        // SAFETY: this thread alone claimed `index`.
        unsafe { (*slot.event.get()).write(event) };
        slot.written.store(true, Ordering::Release);
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The events recorded so far, in order; one still being written by
    /// another thread at this moment is left out.
    pub fn snapshot(&self) -> (Vec<Event>, u64) {
        let claimed = self.next.load(Ordering::Acquire).min(MAX_EVENTS);
        let events = self.slots[..claimed]
            .iter()
            .filter(|slot| slot.written.load(Ordering::Acquire))
            // SAFETY: `written` is set only after the event is complete.
            .map(|slot| unsafe { (*slot.event.get()).assume_init() })
            .collect();
        (events, self.dropped())
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
        let log = TraceLog::new(42);
        for _ in 0..MAX_EVENTS + 3 {
            log.record(Op::Alloc, Api::cudaMalloc, 0, 0x10, 8, Placement::Device, 0);
        }
        let (events, dropped) = log.snapshot();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(dropped, 3);
        assert_eq!(events[5].seq, 5);
    }

    #[test]
    fn json_form_of_an_event() {
        let log = TraceLog::new(42);
        log.record(
            Op::Alloc,
            Api::cudaMallocAsync,
            1,
            0x7f00,
            4096,
            Placement::Host,
            0,
        );
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
