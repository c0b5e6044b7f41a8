//! Room held under the quota for CUDA's stream-ordered pools to grow into.
//!
//! CUDA may grow a pool by a chunk for an allocation, even where the pool's
//! unused reserve would hold it (a reserve split into pieces, or kept for
//! another stream's frees), and a growth shows only once the allocation is
//! made, when no trim can give it back while the allocation lives in it.
//! So before each allocation from a pool, room for the largest growth seen
//! is held for it: the allocation takes a *ticket*, and the room held for
//! the device's pools, counted as the device's, is brought up to one growth
//! for each ticket out. The tickets out and the room held change together,
//! under one lock, so that two threads never count on the same bytes for
//! their growths, and the room is there whoever's recount sees a growth
//! first ([`super::stream_pools`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use vramshare_common::event::Api;

use crate::config::Device;
use crate::state::{lock, PoolRoom, State};

/// The least a pool is taken to grow by at once, before a growth is seen.
const LEAST_GROWTH: u64 = 2 << 20;

/// The largest growth of a pool's reserve beyond its live blocks seen at an
/// allocation: what CUDA adds to a pool's reserve when an allocation does
/// not fit in it (a chunk), less the allocation.
static LARGEST_GROWTH: AtomicU64 = AtomicU64::new(0);

/// The most a pool is taken to grow by at once.
fn growth() -> u64 {
    LARGEST_GROWTH.load(Relaxed).max(LEAST_GROWTH)
}

/// Learns a growth of `bytes` seen at an allocation; the largest before it.
pub fn learn_growth(bytes: u64) -> u64 {
    LARGEST_GROWTH.fetch_max(bytes, Relaxed)
}

/// Before an allocation of `size` bytes (counted already at its size) from
/// a pool on `device` that CUDA serves: takes a ticket, and holds room for
/// its growth under `limit`. Where the room is short, it is made as room
/// for a new block is: the tier's kept blocks whose frees are reached give
/// theirs, else (where moves overlap the job's kernels) the tier's blocks
/// least needed move to host memory.
///
/// Whether the allocation may go to CUDA's pool: not where no room for a
/// growth could be made: the allocation then goes where one over the quota
/// goes (host memory), not into a growth the quota has no room for. Not
/// even where the pool's reserve looks large enough: CUDA was seen to grow
/// a pool by a chunk for small allocations beside unused reserve (the same
/// pieces and other streams' frees), and by 32 MiB past a large one's
/// bytes, which took a job with moves off 12.4 MiB over its quota on an
/// H100. Only an allocation of 2 MiB or more made before any growth was
/// seen goes on without the room: until CUDA has grown a pool past its
/// allocations, a large one is taken to take chunks of its own size,
/// counted already. Each ticket taken is handed back by the allocation's
/// recount, or by [`ticket_back`] where CUDA refused the allocation.
pub fn take_ticket(state: &'static State, api: Api, device: Device, size: u64, limit: u64) -> bool {
    let need = {
        let mut room = lock(&state.pool_rooms[device.index()]);
        room.out += 1;
        let need = room.out.saturating_mul(growth()).saturating_sub(room.held);
        if need == 0 || state.ledger.try_reserve(device, need, limit) {
            room.held += need;
            return true;
        }
        need
    };
    // Made outside the lock: making room may move blocks. Two threads may
    // both make room meanwhile; what is held beyond need goes back at
    // their recounts.
    let made = super::tier::kept::room_for(state, device, need, limit, false)
        || super::tier::room_for_new(state, api, device, need, limit);
    let mut room = lock(&state.pool_rooms[device.index()]);
    if made {
        room.held += need;
        return true;
    }
    if size >= LEAST_GROWTH && LARGEST_GROWTH.load(Relaxed) == 0 {
        return true;
    }
    room.out = room.out.saturating_sub(1);
    false
}

/// Hands back a ticket [`take_ticket`] gave, and gives back the room held
/// beyond what the tickets still out need and, where the room free under
/// `limit` and the sharing pool's budget is short of a growth, one growth
/// more (kept so that the next allocation finds it made).
pub fn ticket_back(state: &State, device: Device, limit: u64) {
    let mut room = lock(&state.pool_rooms[device.index()]);
    room.out = room.out.saturating_sub(1);
    give_back_unneeded(state, device, limit, &mut room);
}

/// [`ticket_back`]'s give-back alone, after a recount not an allocation's.
pub fn settle_held(state: &State, device: Device, limit: u64) {
    let mut room = lock(&state.pool_rooms[device.index()]);
    give_back_unneeded(state, device, limit, &mut room);
}

fn give_back_unneeded(state: &State, device: Device, limit: u64, room: &mut PoolRoom) {
    if room.held == 0 {
        return;
    }
    let used = state.ledger.device(device).device_bytes.load(Relaxed);
    let free = limit
        .saturating_sub(used)
        .min(super::moves::pool_room(state, device));
    let growth = growth();
    let for_tickets = room.out.saturating_mul(growth);
    let beyond = room.held.saturating_sub(for_tickets).min(
        free.saturating_add(room.held)
            .saturating_sub(for_tickets.saturating_add(growth)),
    );
    room.held -= beyond;
    state.ledger.unreserve(device, beyond);
}

/// Gives back the room held for `device`'s pools but for what the tickets
/// out need, before anything on it spills and at a quota cut: whether
/// there was any.
pub fn give_back_headroom(state: &State, device: Device) -> bool {
    let mut room = lock(&state.pool_rooms[device.index()]);
    let beyond = room.held.saturating_sub(room.out.saturating_mul(growth()));
    room.held -= beyond;
    state.ledger.unreserve(device, beyond);
    beyond > 0
}

/// Takes up to `bytes` of the room held for `device`'s pools, for a rise of
/// their reserve: what it took (the caller counts it as the pool's, or
/// puts it back with [`put_back`]).
pub fn take_held(state: &State, device: Device, bytes: u64) -> u64 {
    let mut room = lock(&state.pool_rooms[device.index()]);
    let took = room.held.min(bytes);
    room.held -= took;
    took
}

/// Puts back room [`take_held`] took, still reserved.
pub fn put_back(state: &State, device: Device, bytes: u64) {
    lock(&state.pool_rooms[device.index()]).held += bytes;
}
