//! The process's own copy of its events, for the JSON written at exit when
//! `VRAMSHARE_TRACE` names a file (the shared ring may have overwritten
//! them by then).

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use vramshare_common::event::Event;

/// Events kept in memory, in slots claimed with one atomic increment: no
/// lock on the allocation path. The slots are zeroed memory from the kernel,
/// so the pages of the 1M-event cap cost nothing until events reach them.
/// Past the cap, events are counted, not kept, so that a job making millions
/// of allocations does not grow without bound.
pub struct TraceLog {
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
    pub fn new() -> Self {
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
            slots,
            next: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Default for TraceLog {
    fn default() -> Self {
        Self::new()
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
pub fn thread_id() -> u32 {
    thread_local! {
        // SAFETY: gettid has no preconditions.
        static TID: u32 = unsafe { libc::gettid() } as u32;
    }
    // During thread teardown the cache may be gone: ask the kernel.
    TID.try_with(|tid| *tid)
        // SAFETY: gettid has no preconditions.
        .unwrap_or_else(|_| unsafe { libc::gettid() } as u32)
}

impl TraceLog {
    /// Keeps a copy of `event`, numbered in this process's order.
    pub fn record(&self, event: &Event) {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = self.slots.get(index) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let event = Event {
            seq: index as u64,
            ..*event
        };
        // SAFETY: this thread alone claimed `index`.
        unsafe { (*slot.event.get()).write(event) };
        slot.written.store(true, Ordering::Release);
    }

    /// Events recorded so far (kept or dropped): the next one's number.
    pub fn recorded(&self) -> u64 {
        self.next.load(Ordering::Relaxed) as u64
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

#[cfg(test)]
mod tests {
    use super::*;
    use vramshare_common::event::{Api, Op, Placement};

    #[test]
    fn events_past_the_cap_are_counted() {
        let log = TraceLog::new();
        let event = Event::new(
            0,
            1,
            42,
            42,
            Op::Alloc,
            Api::cudaMalloc,
            0,
            0x10,
            8,
            Placement::Device,
            0,
        );
        for _ in 0..MAX_EVENTS + 3 {
            log.record(&event);
        }
        let (events, dropped) = log.snapshot();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(dropped, 3);
        assert_eq!(events[5].seq, 5, "numbered in the process's order");
        assert_eq!(events[5].ptr, 0x10);
    }
}
