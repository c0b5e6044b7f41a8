//! The uses in flight of each tier block, for moves that overlap the job's
//! kernels (`VRAMSHARE_MOVES=overlap`). Every launch, copy or library call
//! that names a tier block records the block's own event on its stream
//! after it. A block whose event has completed is idle: no work the shim
//! saw naming it is queued or running, so it may be copied and remapped
//! while other kernels run. Work on another stream than the one the event
//! was last recorded on waits for it first, so that a block coming onto
//! the device (its event recorded after its copy, on the tier's stream) is
//! there before any kernel that names it runs. Each event is of the API
//! of the work that recorded it (the runtime's or the driver's), and asked
//! through that API. Work that names a block the mover thread is to move
//! out claims it back first ([`super::mover`]).
//!
//! What this trusts: that a kernel touches only the blocks its parameters
//! (or its library call's operands) point into. A block handed out again
//! from the kept ones waits for its free (whose event stands for the freed
//! block's uses) before it moves in. To go out beside the kernels, a block
//! needs work to have named it since it was handed out: a library keeps
//! some memory of its own that its calls do not name (cuBLAS's workspace),
//! and such a block never moves beside them. A launch whose parameters the
//! shim could not read, that named more words than are kept, or of a graph,
//! waits for the copies still landing, and makes the next move wait for the
//! device, as moves do with `on`; so does work while a stream is captured.
//!
//! Not covered: pointers a library call is given other than through its
//! operands (a cuBLASLt epilogue's bias, set in the matmul's descriptor),
//! and pointers kept in device memory.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::config::{Device, Moves};
use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::reused::Reused;
use crate::state::tier::{Backing, Kept};
use crate::state::{config, State};

use super::backing::{self, Direction};
use super::kept::{give_back_event, stream_key, take_event};
use super::moves::timed;

/// Whether moves overlap the job's kernels.
pub fn overlapping() -> bool {
    config().moves == Moves::Overlap
}

/// Whether `state` tracks uses: moves overlap and the tier has blocks.
fn tracking(state: &State) -> bool {
    overlapping() && state.tier.active.load(Relaxed)
}

/// After a launch whose parameters could not be read (or work whose uses
/// could not be recorded): the next move waits for the device first.
pub fn unread(state: &State) {
    if overlapping() {
        state.tier.unread_since_drain.store(true, Relaxed);
    }
}

/// The tier's live blocks that `words` (a use's, every one that falls in
/// the tier's addresses) point into, by start: what the use may touch,
/// whether the launches' index knew the blocks or not. With more words than
/// were kept (`overflowed`), the use may touch others. While a stream is
/// being captured, an event recorded or waited on there would become a
/// part of the graph: none is, and the next move drains instead. Nor is
/// one while the tier is quiet ([`super::quiet`]). Called inside the gate,
/// for work by `api`.
pub fn touched(state: &State, api: Api, words: &[u64], overflowed: bool) -> Reused<usize> {
    let mut starts = Reused::new(&SPARE_STARTS);
    if !tracking(state) {
        return starts;
    }
    if overflowed || (!words.is_empty() && state.access.graphs.capturing_any()) {
        unread(state);
    }
    if state.access.graphs.capturing_any() {
        // Not recorded, so not claimed one by one either.
        if !words.is_empty() {
            super::mover::claim_all(state);
        }
        return starts;
    }
    if words.is_empty() {
        return starts;
    }
    if super::quiet::unrecorded(state, api) {
        state.tier.unrecorded_uses.fetch_add(1, Relaxed);
        return starts;
    }
    state.tier.holding(words, &mut starts);
    starts
}

thread_local! {
    /// A buffer for the next use's blocks, kept from the last.
    static SPARE_STARTS: Cell<Vec<usize>> = const { Cell::new(Vec::new()) };
}

/// Before a call the shim passes to CUDA unread (its hook failed): no move
/// the mover thread was to make goes on under it, and the next move waits
/// for the device. The caller holds what this returns until the call is
/// passed on: inside the gate, no drain can come between the mark and the
/// call, and take the mark away before the call is queued.
pub fn unknown_call() -> Option<crate::state::gate::Inside<'static>> {
    let state = crate::state::started()?;
    let inside = super::enter(state);
    unread(state);
    super::mover::claim_all(state);
    inside
}

/// Before a launch whose uses are not all known (its parameters unread,
/// more words than were kept, an executable graph's): every move the
/// mover thread was to make is claimed back, it waits here for the copies
/// onto the device still landing on `api`'s current device, and the next
/// move waits for the device.
pub fn opaque(state: &State, api: Api) {
    if !tracking(state) {
        return;
    }
    unread(state);
    super::mover::claim_all(state);
    if let Ok(device) = Backend::of(api).current_device() {
        for direction in Direction::IN {
            let _ = backing::wait(device, direction);
        }
    }
}

/// One of the tier's events: its handle, and whether it is the runtime's
/// (else the driver's). Asked through the API it was made by.
#[derive(Clone, Copy)]
pub(super) struct Event(pub usize, pub bool);

impl Event {
    pub(super) fn of(backing: &Backing) -> Option<Event> {
        (backing.used != 0).then_some(Event(backing.used, backing.used_runtime))
    }

    pub fn complete(self) -> bool {
        let event = self.0 as *mut c_void;
        // SAFETY: an event of the tier's, not yet destroyed.
        let rc = unsafe {
            if self.1 {
                real::cudaEventQuery(event)
            } else {
                real::cuEventQuery(event)
            }
        };
        rc == CUDA_SUCCESS
    }

    pub fn wait(self) -> bool {
        let event = self.0 as *mut c_void;
        // SAFETY: as above.
        let rc = unsafe {
            if self.1 {
                real::cudaEventSynchronize(event)
            } else {
                real::cuEventSynchronize(event)
            }
        };
        rc == CUDA_SUCCESS
    }

    /// Makes `stream` (of a call in its per-thread form, `per_thread`) wait
    /// for it; false if CUDA refused.
    pub fn wait_on(self, stream: usize, per_thread: bool) -> bool {
        let (event, at) = (self.0 as *mut c_void, stream as *mut c_void);
        // SAFETY: the caller's stream and an event of the tier's.
        let rc = unsafe {
            match (self.1, per_thread) {
                (true, false) => real::cudaStreamWaitEvent(at, event, 0),
                (true, true) => real::cudaStreamWaitEvent_ptsz(at, event, 0),
                (false, false) => real::cuStreamWaitEvent(at, event, 0),
                (false, true) => real::cuStreamWaitEvent_ptsz(at, event, 0),
            }
        };
        rc == CUDA_SUCCESS
    }

    /// As [`Event::wait_on`]; waits here if CUDA refuses.
    pub(super) fn order(self, stream: usize, per_thread: bool) {
        if !self.wait_on(stream, per_thread) {
            self.wait();
        }
    }

    /// Records it on `stream`; false if CUDA refused.
    pub fn record(self, stream: usize, per_thread: bool) -> bool {
        let (event, at) = (self.0 as *mut c_void, stream as *mut c_void);
        // SAFETY: as above.
        let rc = unsafe {
            match (self.1, per_thread) {
                (true, false) => real::cudaEventRecord(event, at),
                (true, true) => real::cudaEventRecord_ptsz(event, at),
                (false, false) => real::cuEventRecord(event, at),
                (false, true) => real::cuEventRecord_ptsz(event, at),
            }
        };
        rc == CUDA_SUCCESS
    }
}

/// `cudaEventDisableTiming`, `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = 2;

/// An event of the runtime's (`runtime`) or the driver's, without timing:
/// a spare one, or a new one.
pub(super) fn new_event(state: &State, runtime: bool) -> Option<Event> {
    if let Some(event) = take_event(state, runtime) {
        return Some(Event(event, runtime));
    }
    let mut event = std::ptr::null_mut();
    // SAFETY: writes the event we own.
    let rc = unsafe {
        if runtime {
            real::cudaEventCreateWithFlags(&mut event, DISABLE_TIMING)
        } else {
            real::cuEventCreate(&mut event, DISABLE_TIMING)
        }
    };
    (rc == CUDA_SUCCESS).then_some(Event(event as usize, runtime))
}

fn event_of(state: &State, ptr: usize) -> Option<Event> {
    Event::of(&*state.tier.blocks.get(&ptr)?)
}

/// Before work by `api` on `stream` (`None`: a library call whose stream
/// is not known) that may touch `named`: the work is ordered after each
/// block's last use on another stream that has not completed, its copy
/// onto the device among them. With no stream to order, the wait is here.
#[inline]
pub fn order(state: &State, api: Api, named: &[usize], stream: Option<usize>) {
    if !named.is_empty() && tracking(state) {
        order_named(state, api, named, stream);
    }
}

/// [`order`]'s work, where there is some: out of line, so that a use with
/// none skips its code.
#[inline(never)]
fn order_named(state: &State, api: Api, named: &[usize], stream: Option<usize>) {
    // A block the mover thread was to move out stays; one it is moving is
    // waited for.
    super::mover::claim(state, named);
    let key = stream.map(|stream| stream_key(api, stream));
    timed(&state.tier.uses_ns, || {
        for ptr in named {
            // Held while the work is ordered: another thread's record cannot
            // give the event back meanwhile.
            let Some(backing) = state.tier.blocks.get(ptr) else {
                continue;
            };
            let Some(event) = Event::of(&backing) else {
                continue;
            };
            if key.is_some_and(|key| key != 0 && key == backing.used_on) || event.complete() {
                continue;
            }
            match stream {
                Some(stream) => event.order(stream, api.is_per_thread()),
                None => {
                    timed(&state.tier.uses_wait_ns, || event.wait());
                }
            }
        }
    });
}

/// Whether `a` (a stream of a call by `a_api`) and `b` (of `b_api`) are one
/// stream, the default streams' forms told apart as the calls mean them.
pub fn same_stream(a_api: Api, a: usize, b_api: Api, b: usize) -> bool {
    stream_key(a_api, a) == stream_key(b_api, b)
}

/// After work by `api` on `stream` (`None`: not known) that may have
/// touched `named`: each block's event is recorded there, in the API of
/// the work, once that stream waits for a last use elsewhere not yet
/// complete (so the event stands for both). With no stream, or if CUDA
/// refuses, the next move drains the device instead.
#[inline]
pub fn used(state: &State, api: Api, named: &[usize], stream: Option<usize>) {
    if !named.is_empty() && tracking(state) {
        record_uses(state, api, named, stream);
    }
}

/// [`used`]'s work, where there is some: out of line, so that a use with
/// none skips its code.
#[inline(never)]
fn record_uses(state: &State, api: Api, named: &[usize], stream: Option<usize>) {
    let Some(stream) = stream else {
        unread(state);
        return;
    };
    let runtime = Backend::of(api) == Backend::Runtime;
    let (key, per_thread) = (stream_key(api, stream), api.is_per_thread());
    timed(&state.tier.uses_ns, || {
        for ptr in named {
            let Some(mut backing) = state.tier.blocks.get_mut(ptr) else {
                continue;
            };
            let held = Event::of(&backing);
            if let Some(held) = held {
                if (key == 0 || key != backing.used_on) && !held.complete() {
                    held.order(stream, per_thread);
                }
            }
            let own = held.filter(|event| event.1 == runtime);
            let Some(event) = own.or_else(|| new_event(state, runtime)) else {
                drop(backing);
                unread(state);
                continue;
            };
            if !event.record(stream, per_thread) {
                drop(backing);
                if own.is_none() {
                    give_back_event(state, event.0, event.1);
                }
                unread(state);
                continue;
            }
            backing.used = event.0;
            backing.used_runtime = event.1;
            backing.used_on = key;
            backing.known = true;
            drop(backing);
            // One of the other API, now waited for by the new record.
            if let Some(old) = held.filter(|old| old.0 != event.0) {
                give_back_event(state, old.0, old.1);
            }
        }
    });
}

/// A block handed out again from the kept ones (`kept`, its `backing`):
/// where moves overlap, the free's event stands for the freed block's
/// uses until work names the new one, whose uses are not known yet;
/// elsewhere the free's event is given back.
pub fn handed_out(state: &State, backing: &mut Backing, kept: &Kept) {
    forget(state, backing);
    backing.known = false;
    if overlapping() {
        backing.used = kept.event;
        backing.used_runtime = kept.runtime_event;
        backing.used_on = kept.stream;
    } else {
        backing.used = 0;
        give_back_event(state, kept.event, kept.runtime_event);
    }
}

/// Whether work has named the block at `ptr` since it was handed out, so
/// that it may move out beside the job's kernels once its last use has
/// completed.
pub fn known(state: &State, ptr: usize) -> bool {
    state
        .tier
        .blocks
        .get(&ptr)
        .is_some_and(|b| b.known && b.used != 0)
}

/// Whether the block's last use recorded has completed (or it has none).
pub fn idle(state: &State, ptr: usize) -> bool {
    event_of(state, ptr).is_none_or(Event::complete)
}

/// Whether the last use recorded of the block of `backing` has completed.
pub fn idle_backing(backing: &Backing) -> bool {
    Event::of(backing).is_none_or(Event::complete)
}

/// Waits for the block's last use known to complete; false if CUDA said
/// no.
pub fn wait_idle(state: &State, ptr: usize) -> bool {
    event_of(state, ptr).is_none_or(Event::wait)
}

/// After the copy of the block at `ptr` onto `device` was queued on the
/// tier's stream of `direction`: its event is recorded after it there, so
/// that work naming the block waits for its bytes. False if it could not
/// be (the caller then waits for the copy).
pub fn arriving(state: &State, ptr: usize, device: Device, direction: Direction) -> bool {
    let Ok(stream) = backing::stream(device, direction) else {
        return false;
    };
    let Some(mut backing) = state.tier.blocks.get_mut(&ptr) else {
        return false;
    };
    let held = Event::of(&backing).filter(|event| !event.1);
    let Some(event) = held.or_else(|| new_event(state, false)) else {
        return false;
    };
    if backing::mark(event.0, device, direction).is_err() {
        if held.is_none() {
            drop(backing);
            give_back_event(state, event.0, false);
        }
        return false;
    }
    let replaced = Event::of(&backing).filter(|old| old.0 != event.0);
    backing.used = event.0;
    backing.used_runtime = false;
    backing.used_on = stream as usize;
    drop(backing);
    if let Some(old) = replaced {
        give_back_event(state, old.0, old.1);
    }
    true
}

/// The event of a block that is gone, for the next block.
pub fn forget(state: &State, backing: &Backing) {
    if let Some(event) = Event::of(backing) {
        give_back_event(state, event.0, event.1);
    }
}
