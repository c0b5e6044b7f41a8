//! Tier blocks freed in stream order (`cudaFreeAsync`, `cuMemFreeAsync`)
//! are kept whole for the next allocation of their size, as CUDA's own
//! pools keep freed memory. A job that allocates each tensor from a
//! stream-ordered pool (PyTorch's `backend:cudaMallocAsync`) frees and
//! allocates the same sizes every step: a kept block serves the next one
//! with no virtual memory call, no host memory to pin, and, where it is on
//! the device, no room to make. Since each tensor is a block of its own,
//! moves carry tensors rather than a caching allocator's segments, and a
//! freed tensor's bytes never cross the link.
//!
//! A kept block serves an allocation on the stream it was freed on at
//! once (the stream orders the new work after the free), and one on any
//! other stream once the event recorded at the free has completed, or with
//! that stream made to wait for the event. Kept blocks on the device count
//! there, like a pool's reserve, until given back: before any allocation
//! would go to host memory, before a move makes room by sending live blocks
//! to the host, and at quota cuts.

use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;

use cudart_sys::*;
use vramshare_common::event::{Api, Placement};

use crate::config::Device;
use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::ledger::Block;
use crate::state::tier::Kept;
use crate::state::{lock, State};

use super::moves::timed;
use super::uses::{new_event, Event};
use super::{backing, spare};

/// The key a stream has for reuse without waiting: its handle, 1 for the
/// legacy default stream, 0 (none) for a per-thread default stream, which
/// differs from one thread to the next.
pub(super) fn stream_key(api: Api, stream: usize) -> usize {
    match stream {
        0 if api.is_per_thread() => 0,
        0 | 1 => 1,
        2 => 0,
        handle => handle,
    }
}

/// Whether the stream-ordered free of the block at `ptr` is kept here: it
/// is one of the tier's.
pub fn keeps(state: &State, ptr: usize) -> bool {
    state.tier.blocks.contains_key(&ptr)
}

/// Keeps the tier block at `ptr`, which the ledger has let go of (holding
/// its device bytes, [`crate::state::ledger::Ledger::take_holding`]),
/// freed by `api` on `stream`. Where no event can say when the free is
/// reached, the block is given back as `cudaFree` does. While a stream is
/// captured, the free belongs to the graph and happens only when the graph
/// runs, if ever: the block stays mapped and counted, is never reused, and
/// is given back once no graph can run ([`super::captured`]); so is a
/// group's block one of whose members was freed in a capture (`held`).
pub fn keep(
    state: &State,
    api: Api,
    ptr: usize,
    block: &Block,
    stream: usize,
    held: bool,
) -> cudaError_t {
    if held || state.access.graphs.capturing_any() {
        if let Some((_, backing)) = state.tier.remove(ptr) {
            if block.placement == Placement::Host {
                state.tier.left_host(backing.device, backing.size);
            }
            super::captured::park(state, ptr, backing, stream);
        }
        return cudaSuccess;
    }
    // The free comes after the block's last use the tier knows of. Where
    // that is a copy onto the device on one of the tier's streams (a block
    // brought ahead and freed before any work named it, its copy perhaps
    // waiting for another block's free), an allocation that takes the block
    // back at once on the freeing stream must not be written over when the
    // copy lands. (A last use on the freeing stream itself is ordered
    // already: the common case, left without a call.)
    let key = stream_key(api, stream);
    let last_use = state
        .tier
        .blocks
        .get(&ptr)
        .filter(|b| key == 0 || b.used_on != key)
        .and_then(|b| Event::of(&b));
    if let Some(last_use) = last_use.filter(|e| !e.complete()) {
        last_use.order(stream, api.is_per_thread());
    }
    let Some((event, runtime_event)) = record(state, api, stream) else {
        debug!(
            "recording an event for a stream-ordered free failed; the block is given back instead"
        );
        if block.placement == Placement::Device {
            state.ledger.unreserve(block.device, block.size);
        }
        return super::free(state, api, ptr, block);
    };
    let Some((_, backing)) = state.tier.remove(ptr) else {
        give_back_event(state, event, runtime_event);
        if block.placement == Placement::Device {
            state.ledger.unreserve(block.device, block.size);
        }
        return cudaErrorInvalidValue;
    };
    if block.placement == Placement::Host {
        state.tier.left_host(backing.device, backing.size);
    }
    let kept = Kept {
        ptr,
        backing,
        stream: stream_key(api, stream),
        event,
        runtime_event,
        empty: false,
    };
    add(state, kept);
    cudaSuccess
}

/// Adds `kept` to the kept blocks, the latest; then releases the oldest in
/// host memory beyond the bound ([`spare::over_host_bound`]).
fn add(state: &State, kept: Kept) {
    let device = kept.backing.device;
    let dropped = {
        let mut list = lock(&state.tier.kept);
        list.push(kept);
        spare::over_host_bound(state, &mut list, device)
    };
    for kept in dropped {
        release(state, kept);
    }
}

/// Whether `kept` is on `device` with host memory and no device memory:
/// its bytes are its host memory's, which no live block holds.
pub(super) fn in_host_on(kept: &Kept, device: Device) -> bool {
    kept.backing.device == device && kept.backing.on_device == 0 && kept.backing.in_host != 0
}

/// Which kept blocks an allocation may be served by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serve {
    /// Only one on the device, whose bytes count there already.
    OnDevice,
    /// One whose range is empty, given device memory: the caller has
    /// reserved its bytes under the quota.
    IntoRoom,
    /// Any: on the device first, then in host memory, then one whose range
    /// is empty, given its host memory (there is no room on the device).
    Anywhere,
}

/// Where a kept block's range points.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Range {
    Device,
    Host,
    Empty,
}

fn range_of(kept: &Kept) -> Range {
    match (kept.empty, kept.backing.on_device) {
        (true, _) => Range::Empty,
        (false, 0) => Range::Host,
        (false, _) => Range::Device,
    }
}

/// A kept block of `size` bytes on `device` for an allocation by `api` on
/// `stream`, as `serve` allows, recorded as the caller's. Its address, if
/// there was one.
pub fn reuse(
    state: &State,
    api: Api,
    device: Device,
    size: u64,
    stream: usize,
    serve: Serve,
) -> Option<*mut c_void> {
    let key = stream_key(api, stream);
    let ranges: &[Range] = match serve {
        Serve::OnDevice => &[Range::Device],
        Serve::IntoRoom => &[Range::Empty],
        Serve::Anywhere => &[Range::Device, Range::Host, Range::Empty],
    };
    let (mut kept, ordered) = {
        let mut list = lock(&state.tier.kept);
        let fits = |k: &Kept, range: Range| {
            k.backing.device == device && k.backing.size == size && range_of(k) == range
        };
        let ordered = |k: &Kept| (key != 0 && k.stream == key) || reached(k);
        // The latest freed first: its memory is the likeliest in caches,
        // and steps that repeat get the same addresses back. One whose
        // free is not reached yet serves too, once the allocation's stream
        // waits for the free, as CUDA's pools do.
        let mut found = None;
        for &range in ranges {
            found = found
                .or_else(|| list.iter().rposition(|k| fits(k, range) && ordered(k)))
                .or_else(|| list.iter().rposition(|k| fits(k, range)));
        }
        let kept = list.remove(found?);
        let ordered = ordered(&kept);
        (kept, ordered)
    };
    if !ordered && !wait_on_stream(api, stream, &kept) {
        // Not ordered after the free: it stays kept.
        lock(&state.tier.kept).insert(0, kept);
        return None;
    }
    if kept.empty {
        let mapped = timed(&state.tier.hand_out_ns, || fill(&mut kept, serve));
        if !mapped {
            // No memory for it: it stays kept, as it was.
            lock(&state.tier.kept).insert(0, kept);
            return None;
        }
    }
    let on_device = kept.backing.on_device != 0;
    let mut backing = kept.backing;
    backing.fetched_in = 0;
    backing.failed_ns = 0;
    super::once::handed_out(&mut backing);
    backing.born = state.tier.gate.entered();
    super::uses::handed_out(state, &mut backing, &kept);
    state.tier.insert(kept.ptr, backing);
    if !on_device {
        state.tier.entered_host(device, size);
    }
    state.tier.reused.fetch_add(1, Relaxed);
    super::record_block(state, api, kept.ptr, size, device, on_device, false);
    Some(kept.ptr as *mut c_void)
}

/// Maps memory at the empty range of `kept` as it is handed out: new
/// device memory into the room reserved for it, else its host memory.
/// Whether it was mapped (if not, it is as it was).
fn fill(kept: &mut Kept, serve: Serve) -> bool {
    let at = kept.ptr as CUdeviceptr;
    let backing = &mut kept.backing;
    if serve == Serve::IntoRoom {
        let Ok(handle) = backing::create(backing.size, backing.device, true) else {
            return false;
        };
        if backing::map(at, backing.size, handle, backing.device).is_err() {
            backing::release(handle);
            return false;
        }
        backing.on_device = handle;
    } else if backing::map(at, backing.size, backing.in_host, backing.device).is_err() {
        return false;
    }
    kept.empty = false;
    true
}

/// Takes out a kept block of `size` bytes on `device`'s memory to lend its
/// memory to a block coming in, where no room is free: the room its free
/// will give, taken in stream order, as CUDA's pools hand memory freed on a
/// stream to the next allocation once that waits for the free. Its bytes
/// count on the device already, and become the incoming block's. The
/// oldest first: its free is the likeliest to be reached soonest. The
/// caller queues the copy in behind the free ([`order_after`]), then
/// passes the block to [`lent`], or back to [`not_lent`] if the move failed.
pub(super) fn lend(state: &State, device: Device, size: u64) -> Option<Kept> {
    let mut list = lock(&state.tier.kept);
    let index = list.iter().position(|k| {
        k.backing.device == device && k.backing.size == size && range_of(k) == Range::Device
    })?;
    Some(list.remove(index))
}

/// Makes the tier's copies onto `device` wait for the free that kept
/// `kept`, and for its last use (a copy of its own may still be landing).
/// Where CUDA refuses, a copy that work needs now waits here; one coming
/// ahead of need does not wait for a free the device may reach late: false,
/// and the move is not made.
pub(super) fn order_after(kept: &Kept, device: Device, direction: backing::Direction) -> bool {
    let stream = backing::stream(device, direction).ok();
    for event in events_of(kept) {
        match stream {
            Some(stream) if event.complete() || event.wait_on(stream as usize, false) => {}
            _ if direction == backing::Direction::AheadAfterFree => return false,
            _ => {
                event.wait();
            }
        }
    }
    true
}

/// The free's event that kept `kept`, and its last use's, if it has one.
fn events_of(kept: &Kept) -> impl Iterator<Item = Event> {
    std::iter::once(Event(kept.event, kept.runtime_event)).chain(Event::of(&kept.backing))
}

/// A block whose memory [`lend`] took, now mapped at the block coming in
/// too: its own range still maps it until its free is reached
/// ([`settle_lending`]), since work given before the free may still use it.
pub(super) fn lent(state: &State, kept: Kept) {
    state.tier.lending.push(kept);
}

/// A block [`lend`] took whose memory the move did not take: kept again, as
/// it was.
pub(super) fn not_lent(state: &State, kept: Kept) {
    lock(&state.tier.kept).insert(0, kept);
}

/// Unmaps the ranges of the blocks that lent their memory whose frees are
/// reached and whose last uses have completed: each is then kept with its
/// range empty and its host memory, as [`to_host`] leaves one, or given
/// back if it has none.
#[inline]
pub(super) fn settle_lending(state: &State) {
    if !state.tier.lending.looks_empty() {
        end_settled_lending(state);
    }
}

/// [`settle_lending`] while blocks lend: out of line, so that a use while
/// none do skips its code.
#[inline(never)]
fn end_settled_lending(state: &State) {
    for kept in take_lending(state, settled) {
        end_lending(state, kept);
    }
}

/// Takes out of the blocks lending their memory those that `which` picks.
fn take_lending(state: &State, which: impl Fn(&Kept) -> bool) -> Vec<Kept> {
    if state.tier.lending.looks_empty() {
        return Vec::new();
    }
    state.tier.lending.with(|list| {
        let (taken, rest) = std::mem::take(list).into_iter().partition(|k| which(k));
        *list = rest;
        taken
    })
}

/// Before the device memory `handle` is released: the blocks that lent it
/// have their ranges unmapped first, so that no mapping outlives its count.
/// Once the block it was lent to has been used, their frees are reached
/// (its copy in waited for them); where one is not (its move failed, or it
/// goes before any use), this waits for it, and for its last use, work the
/// job has given already.
fn lent_back(state: &State, handle: u64) {
    for kept in take_lending(state, |k| k.backing.on_device == handle) {
        for event in events_of(&kept) {
            event.wait();
        }
        end_lending(state, kept);
    }
}

/// Releases device memory of the tier's, once no lender's range maps it.
pub(super) fn release_device(state: &State, handle: u64) {
    lent_back(state, handle);
    backing::release(handle);
}

/// Unmaps the range of a block that lent its memory, whose free is reached;
/// it stays kept, empty, if it has host memory, else goes.
fn end_lending(state: &State, mut kept: Kept) {
    backing::unmap(kept.ptr as CUdeviceptr, kept.backing.size);
    kept.backing.on_device = 0;
    kept.empty = true;
    if kept.backing.in_host != 0 {
        add(state, kept);
    } else {
        release(state, kept);
    }
}

/// Bytes of kept blocks on `device`'s memory.
pub fn on_device(state: &State, device: Device) -> u64 {
    lock(&state.tier.kept)
        .iter()
        .filter(|k| k.backing.device == device && k.backing.on_device != 0)
        .map(|k| k.backing.size)
        .sum()
}

/// Gives back kept blocks on `device`'s memory whose frees are reached, the
/// oldest first, while `more(bytes given back so far)`; with `wait`, once
/// none is reached, waits up to [`FREE_WAIT`] for one to be (cheaper than
/// sending an allocation to host memory, whence it would move in at its
/// first use; bounded, since the free may wait for work this thread has
/// yet to give). The bytes given back.
pub fn give_back_while(
    state: &State,
    device: Device,
    wait: bool,
    mut more: impl FnMut(u64) -> bool,
) -> u64 {
    let began = std::time::Instant::now();
    // Since when this has waited for a free to be reached, if it is waiting.
    let mut waiting: Option<std::time::Instant> = None;
    let waited = |since: std::time::Instant| {
        let ns = since.elapsed().as_nanos() as u64;
        state.tier.free_wait_ns.fetch_add(ns, Relaxed);
    };
    let mut given = 0;
    while more(given) {
        let here = |k: &Kept| k.backing.device == device && k.backing.on_device != 0;
        let kept = {
            let mut list = lock(&state.tier.kept);
            if !list.iter().any(here) {
                break;
            }
            list.iter()
                .position(|k| here(k) && settled(k))
                .map(|index| list.remove(index))
        };
        let Some(kept) = kept else {
            if !wait || began.elapsed() > FREE_WAIT {
                break;
            }
            waiting.get_or_insert_with(std::time::Instant::now);
            std::thread::yield_now();
            continue;
        };
        if let Some(since) = waiting.take() {
            waited(since);
        }
        given += kept.backing.size;
        timed(&state.tier.give_back_ns, || {
            if kept.backing.in_host != 0 {
                to_host(state, kept);
            } else {
                release(state, kept);
            }
        });
    }
    if let Some(since) = waiting {
        waited(since);
    }
    given
}

/// Reserves `size` device bytes on `device` under `limit`, giving back kept
/// blocks (waiting for their frees as [`give_back_while`] does, with
/// `wait`) until they fit. Whether they were reserved.
pub fn room_for(state: &State, device: Device, size: u64, limit: u64, wait: bool) -> bool {
    let mut fits = false;
    give_back_while(state, device, wait, |_| {
        fits = state.ledger.try_reserve(device, size, limit);
        !fits
    });
    fits
}

/// How long an allocation waits for a kept block's free to be reached.
const FREE_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Gives back the device memory of a kept block that has host memory, and
/// keeps it on with its range empty: no work may touch a freed block, so
/// its bytes need no home, and mapping host memory costs by the page. The
/// next allocation of its size gets device memory there if there is room,
/// else its host memory, pinned already.
fn to_host(state: &State, mut kept: Kept) {
    let backing = &mut kept.backing;
    backing::unmap(kept.ptr as CUdeviceptr, backing.size);
    release_device(state, backing.on_device);
    backing.on_device = 0;
    kept.empty = true;
    state.ledger.unreserve(backing.device, backing.size);
    add(state, kept);
}

/// Unmaps and releases a kept block whose free is reached, and gives its
/// device bytes back to the count.
fn release(state: &State, kept: Kept) {
    let backing = &kept.backing;
    super::dismantle(state, kept.ptr, backing, !kept.empty);
    if backing.on_device != 0 {
        state.ledger.unreserve(backing.device, backing.size);
    }
    give_back_event(state, kept.event, kept.runtime_event);
}

/// An event recorded on `stream` in the form `api` uses (one given back
/// before, or a new one); (event, whether it is the runtime's). `None` if
/// CUDA refused.
pub(super) fn record(state: &State, api: Api, stream: usize) -> Option<(usize, bool)> {
    let runtime = Backend::of(api) == Backend::Runtime;
    let event = new_event(state, runtime)?;
    if !event.record(stream, api.is_per_thread()) {
        destroy(event.0, runtime);
        return None;
    }
    Some((event.0, runtime))
}

/// A spare event of the runtime's (`runtime`) or the driver's, if one is
/// kept.
pub(super) fn take_event(state: &State, runtime: bool) -> Option<usize> {
    let mut spares = lock(&state.tier.spare_events);
    let found = spares.iter().rposition(|&(_, of)| of == runtime)?;
    Some(spares.swap_remove(found).0)
}

/// Keeps an event no longer waited on (a kept block's, gone, or a move's
/// copy's, landed) for the next free or move: making and destroying one
/// costs more than the free itself. A stream made to wait for it waits for
/// the record it had then.
pub(super) fn give_back_event(state: &State, event: usize, runtime: bool) {
    let mut spares = lock(&state.tier.spare_events);
    if spares.len() < SPARE_EVENTS {
        spares.push((event, runtime));
    } else {
        drop(spares);
        destroy(event, runtime);
    }
}

/// The most events kept for reuse.
const SPARE_EVENTS: usize = 1024;

/// Whether the free that kept `kept` has been reached, and every use of the
/// block recorded has completed (where moves overlap the job's kernels, a
/// copy onto the device may still be landing): nothing can touch it.
pub(super) fn settled(kept: &Kept) -> bool {
    reached(kept) && super::uses::idle_backing(&kept.backing)
}

/// Whether the free that kept `kept` has been reached on its stream.
pub(super) fn reached(kept: &Kept) -> bool {
    Event(kept.event, kept.runtime_event).complete()
}

/// Makes `stream` (in the form `api` uses) wait for the free that kept
/// `kept`; false if CUDA refused.
fn wait_on_stream(api: Api, stream: usize, kept: &Kept) -> bool {
    Event(kept.event, kept.runtime_event).wait_on(stream, api.is_per_thread())
}

/// Destroys an event `record` made; CUDA releases it when its record
/// completes, if it has not yet.
pub(super) fn destroy(event: usize, runtime: bool) {
    let event = event as *mut c_void;
    // SAFETY: an event `record` made, destroyed once; CUDA releases it when
    // its record completes, if it has not yet.
    unsafe {
        if runtime {
            real::cudaEventDestroy(event);
        } else {
            real::cuEventDestroy_v2(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stream_named_alike_by_every_thread_is_reused_without_waiting() {
        assert_eq!(
            stream_key(Api::cudaFreeAsync, 0),
            1,
            "legacy default stream"
        );
        assert_eq!(stream_key(Api::cudaFreeAsync, 1), 1, "cudaStreamLegacy");
        assert_eq!(
            stream_key(Api::cudaFreeAsync_ptsz, 0),
            0,
            "per-thread default"
        );
        assert_eq!(stream_key(Api::cudaFreeAsync, 2), 0, "cudaStreamPerThread");
        assert_eq!(stream_key(Api::cuMemFreeAsync_ptsz, 0x7f00), 0x7f00);
    }
}
