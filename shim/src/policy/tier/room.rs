//! Room on the device for blocks coming in: kept blocks given back first
//! (that moves nothing), then the tier's live blocks whose next use is
//! furthest moved to the host. Where moves overlap the job's kernels (not
//! `strict`: the device was not drained), only blocks whose uses are known
//! may go, each once its last use has completed ([`super::uses`]), and
//! those that go ahead of need move on the mover thread ([`super::mover`]).
//! Also, before the step's peak (where the live blocks required the most out
//! of the device), the blocks that will have to be out by then, sent as
//! soon as they are idle ([`out_for_peak`]); and room for a new block that
//! finds none under the quota, made as a use's would be ([`room_for_new`]).

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use vramshare_common::event::Api;

use crate::config::Device;
use crate::state::tier::Kept;
use crate::state::State;

use super::moves::{self, move_out, timed, Staged};
use super::{ahead, backing, begin, kept, limit, mover, quiet, uses, Timed};

/// The share of the quota kept free for blocks coming in (1/8), so that a
/// block's copy onto the device can start at once and the copies of the
/// blocks making room overlap it. The tier keeps that much less on the
/// device (twice that while blocks come ahead of need, [`kept_free`]): a
/// block that comes later waits for room to be made first.
const MOVE_BUDGET_DIVISOR: u64 = 8;

/// The room made free under `limit` whenever room is made (after a block a
/// use names came in): the move budget, twice it while blocks come ahead
/// of need ([`super::ahead::recording`], and the latest look at the uses
/// to come found one in host memory), since those take what is free
/// beyond the budget ([`spare_beyond_budget`]) and a block a use names
/// must still find room at once. On the GPU, with marked steps, a quarter
/// of the quota beat an eighth; a third was no better. While no block in
/// host memory is among the uses to come (a forward pass filling the
/// quota), the second budget would only send blocks out to come back.
fn kept_free(state: &State, limit: u64) -> u64 {
    let budget = limit / MOVE_BUDGET_DIVISOR;
    if super::ahead::recording(state) && state.tier.ahead_coming.load(Relaxed) {
        budget.saturating_mul(2)
    } else {
        budget
    }
}

/// The room free on `device` under `limit` and under its pool's budget.
pub(super) fn free_under(state: &State, device: Device, limit: u64) -> u64 {
    let used = state.ledger.device(device).device_bytes.load(SeqCst);
    limit
        .saturating_sub(used)
        .min(crate::policy::moves::pool_room(state, device))
}

/// The room free under `limit` on `device` beyond the move budget: what
/// blocks brought ahead of need may take.
pub(super) fn spare_beyond_budget(state: &State, device: Device, limit: u64) -> u64 {
    free_under(state, device, limit).saturating_sub(limit / MOVE_BUDGET_DIVISOR)
}

/// The room left free at the step's peak when blocks go
/// out before it ([`out_for_peak`]): a quarter of the move budget, for
/// allocations the tier does not serve and blocks a little larger than
/// the step before's.
pub(super) fn peak_margin(limit: u64) -> u64 {
    limit / MOVE_BUDGET_DIVISOR / 4
}

/// Where moves overlap the job's kernels: reserves room on `device` under
/// `quota` for a new tier block of `size` bytes that finds none, by moving
/// out the tier's blocks whose next use is furthest and whose last use has
/// completed, as the block's first use would (its work comes next). Made in
/// host memory instead, the block would be pinned host memory that its
/// first use copies onto the device, bytes no work has written. False
/// (nothing reserved) if no such room can be made.
pub fn room_for_new(
    state: &'static State,
    api: Api,
    device: Device,
    size: u64,
    quota: u64,
) -> bool {
    let bound = limit(state, device, Some(quota)).unwrap_or(quota);
    // After a launch the shim could not read, only a drained device could
    // make room: the block is made in host memory, as without this. While
    // the tier is quiet, the device is drained for it: uses went
    // unrecorded only because nothing was to move.
    let quiet = quiet::quiet(state);
    if !uses::overlapping()
        || size > bound / 2
        || (state.tier.unread_since_drain.load(Relaxed) && !quiet)
        || state.access.graphs.capturing_any()
        || backing::ready(api).is_err()
        || !could_make_room(state, device, size, quota, &[], quiet)
    {
        return false;
    }
    let Some(_closed) = state.tier.gate.close() else {
        return false;
    };
    // Asked again behind the gate, where no use goes unrecorded.
    let strict = state.tier.unread_since_drain.load(SeqCst);
    if strict && !quiet::quiet(state) {
        return false;
    }
    // Counted as the moves for a use are, whether or not any block moves.
    if !begin(state, api, strict) {
        return false;
    }
    let _timed = Timed(state, std::time::Instant::now());
    if !make_room(state, device, size, quota, &[], strict) {
        return false;
    }
    // The room kept free is made again beside the job's kernels, as after
    // a block a use names; not once what the step's peak requires out of
    // the device is out or leaving: there the budget made again sends out
    // blocks that the backward pass brings straight back (on an H100, the
    // LM at half its peak moved 3.1 GB more each way in the steps whose
    // loss found too little room).
    if !ahead::out_enough_for_peak(state, device) {
        moves::finish(state, evict_ahead(state, device, bound, &[], false));
    }
    true
}

/// Stages moves to the host, least needed first, until the room under
/// `limit` (the quota, or the pool's budget if lower) on `device` would be
/// what is kept free ([`kept_free`]); `keep` stays.
pub(super) fn evict_ahead(
    state: &'static State,
    device: Device,
    limit: u64,
    keep: &[usize],
    strict: bool,
) -> Vec<Staged> {
    let budget = kept_free(state, limit);
    // The moves the mover thread is making free their room as they land.
    let mut room = free_under(state, device, limit).saturating_add(mover::leaving(state, device));
    let mut staged = Vec::new();
    if room >= budget {
        return staged;
    }
    // Kept blocks go first: giving them back moves nothing.
    room += timed(&state.tier.give_back_ahead_ns, || {
        kept::give_back_while(state, device, false, |given| room + given < budget)
    });
    if room >= budget {
        return staged;
    }
    let candidates = movable_blocks(state, device, keep, strict);
    // Where blocks come ahead of need, those within what was looked at
    // stay: they were found on the device or brought there for their use.
    let horizon = if super::ahead::recording(state) {
        state.access.replay.looked_ahead()
    } else {
        0
    };
    for (next, size, ptr) in by_next_use(state, candidates) {
        if room >= budget || (horizon > 0 && next <= horizon) {
            break;
        }
        // Blocks larger than the budget stay: moving one out would leave
        // more free than the budget is for. Beside the job's kernels, only
        // blocks idle now go: this is ahead of need. That is asked of each
        // block only as its turn comes: each answer is a call to CUDA, and
        // a step's device holds hundreds of blocks.
        if size > budget || !(strict || uses::idle(state, ptr)) {
            continue;
        }
        // Beside the kernels, the mover thread makes the move, while the
        // job's work goes on; else it is staged here.
        let handed = !strict && mover::send(state, ptr, size);
        if !handed {
            let Some(out) = moves::stage_out(state, ptr, size) else {
                continue;
            };
            staged.push(out);
        }
        room += size;
        state.tier.out_kept_free.fetch_add(size, Relaxed);
    }
    staged
}

/// Hands to the mover thread, the least needed first, blocks on `device`
/// idle now whose next use is more than `beyond` uses away, until `bytes`
/// are leaving: before the point of the step where the step before's live
/// blocks required the most out of the device, what will go out by then goes out as soon as
/// nothing uses it, while the link would otherwise wait for the quota to
/// fill. The bytes handed over.
pub(super) fn out_for_peak(
    state: &'static State,
    device: Device,
    limit: u64,
    bytes: u64,
    beyond: u64,
) -> u64 {
    let budget = limit / MOVE_BUDGET_DIVISOR;
    let candidates: Vec<(usize, u64)> = movable_blocks(state, device, &[], false)
        .into_iter()
        .filter(|(_, size)| *size <= budget)
        .collect();
    let mut sent = 0;
    for (next, size, ptr) in by_next_use(state, candidates) {
        if sent >= bytes || next <= beyond {
            break;
        }
        // Whether it is idle, asked only now: each answer is a call to CUDA.
        if uses::idle(state, ptr) && mover::send(state, ptr, size) {
            sent += size;
        }
    }
    sent
}

/// The tier's blocks on `device` that `keep` does not name, as (address,
/// size): what may move out to make room; unless `strict`, only those
/// whose uses are known.
fn movable_blocks(
    state: &State,
    device: Device,
    keep: &[usize],
    strict: bool,
) -> Vec<(usize, u64)> {
    timed(&state.tier.choose_ns, || {
        state
            .ledger
            .tier_on_device(device)
            .into_iter()
            .filter(|(ptr, _)| !keep.contains(ptr) && (strict || uses::known(state, *ptr)))
            .collect()
    })
}

/// Whether room for `size` bytes under `quota` and the pool's budget could
/// be made on `device`: the room free, with the kept blocks there given
/// back, the mover thread's moves landed and the tier's blocks that `keep`
/// does not name moved out (unless `strict`, only those whose uses are
/// known: what may move beside the job's kernels).
pub(super) fn could_make_room(
    state: &State,
    device: Device,
    size: u64,
    quota: u64,
    keep: &[usize],
    strict: bool,
) -> bool {
    let blocks: u64 = movable_blocks(state, device, keep, strict)
        .iter()
        .map(|(_, size)| size)
        .sum();
    let movable = blocks + kept::on_device(state, device) + mover::leaving(state, device);
    let used = state.ledger.device(device).device_bytes.load(SeqCst);
    // A pool's budget holds the members' device bytes together: moving
    // this process's blocks out frees that much of it, no more.
    let pool_room = crate::policy::moves::pool_room(state, device);
    quota.saturating_sub(used).saturating_add(movable) >= size
        && pool_room.saturating_add(movable) >= size
}

/// Gives back the kept blocks on `device`, then moves the tier's blocks
/// there to the host, the least needed first, while `more(bytes freed so
/// far)` (a quota or a pool's budget cut, or a pool member of higher
/// priority wanting room). The bytes freed.
pub fn evict_while(state: &State, device: Device, mut more: impl FnMut(u64) -> bool) -> u64 {
    let first = state.ledger.tier_on_device(device).first().copied();
    let Some(api) = first
        .and_then(|(ptr, _)| state.ledger.block_at(ptr))
        .map(|block| block.api)
    else {
        return 0;
    };
    if state.access.graphs.capturing_any() || backing::ready(api).is_err() {
        return 0;
    }
    let Some(_closed) = state.tier.gate.close() else {
        return 0;
    };
    // Listed again behind the gate: a launch's move may have taken some.
    let candidates = state.ledger.tier_on_device(device);
    // Drained as any strict round is: every launch before the gate has
    // finished, so uses unread or unrecorded till now need no second wait.
    if !begin(state, api, true) {
        return 0;
    }
    let _timed = Timed(state, std::time::Instant::now());
    // Kept blocks first (their caller gave back those reached before): with
    // the device drained, every kept block's free is reached, and giving
    // one back moves nothing.
    let mut moved = kept::give_back_while(state, device, false, &mut more);
    for (_, size, ptr) in by_next_use(state, candidates) {
        if !more(moved) {
            break;
        }
        if move_out(state, ptr, size) {
            moved += size;
        }
    }
    moved
}

/// Blocks as (next use, size, address), the furthest next use first; of
/// equals, the largest.
fn by_next_use(state: &State, blocks: Vec<(usize, u64)>) -> Vec<(u64, u64, usize)> {
    timed(&state.tier.choose_ns, || {
        let starts: Vec<usize> = blocks.iter().map(|(ptr, _)| *ptr).collect();
        let next = state.access.next_uses(&state.ledger, &starts);
        let mut order: Vec<(u64, u64, usize)> = blocks
            .into_iter()
            .zip(next)
            .map(|((ptr, size), next)| (next, size, ptr))
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order
    })
}

/// Where a block coming in finds its room.
pub(super) enum Room {
    /// Its bytes are reserved under the quota.
    Reserved,
    /// A kept block's device memory, lent ([`kept::lend`]).
    Lent(Kept),
}

/// Room on `device` under `quota` for a block of `size` bytes coming in,
/// as [`make_room`] makes it, except that beside the job's kernels (not
/// `strict`), where no room is free, a kept block of its size whose free is
/// queued but not reached lends it its memory before live blocks move out:
/// the copy in waits on the device for the free, the host waits for
/// nothing, and no block goes out that would have to come back. `None` if
/// there is no such room.
pub(super) fn room_for_coming(
    state: &State,
    device: Device,
    size: u64,
    quota: u64,
    keep: &[usize],
    strict: bool,
) -> Option<Room> {
    if state.ledger.try_reserve(device, size, quota)
        || kept::room_for(state, device, size, quota, false)
    {
        return Some(Room::Reserved);
    }
    if !strict {
        if let Some(lender) = lender(state, device, size, quota) {
            return Some(Room::Lent(lender));
        }
    }
    make_room(state, device, size, quota, keep, strict).then_some(Room::Reserved)
}

/// A kept block of `size` bytes on `device` whose memory a block coming in
/// may take, its copy waiting on the device for the free ([`kept::lend`]).
/// A kept block's bytes pass to the block coming in as they are: only
/// while the device is within its limits under `quota` (after a cut, kept
/// blocks go back instead).
pub(super) fn lender(state: &State, device: Device, size: u64, quota: u64) -> Option<Kept> {
    if crate::policy::moves::over_limits(state, device, quota) {
        return None;
    }
    kept::lend(state, device, size)
}

/// Reserves `size` device bytes on `device` under `quota`, moving the
/// tier's blocks whose next use is furthest to the host until they fit.
/// Blocks in `keep` (the work's own) stay. False if there is no such room.
/// Unless `strict`, each victim's last use completes before it moves.
pub(super) fn make_room(
    state: &State,
    device: Device,
    size: u64,
    quota: u64,
    keep: &[usize],
    strict: bool,
) -> bool {
    if state.ledger.try_reserve(device, size, quota) {
        return true;
    }
    // Kept blocks go first: giving them back moves nothing.
    if kept::room_for(state, device, size, quota, false) {
        return true;
    }
    // Then the moves the mover thread is making, chosen before as the
    // least needed: each frees its room as it lands. Behind the closed
    // gate no more are handed over, so waiting for all of them ends.
    if mover::reserve_as_moves_land(state, device, size, quota, usize::MAX) {
        return true;
    }
    let candidates = movable_blocks(state, device, keep, strict);
    let used = state.ledger.device(device).device_bytes.load(SeqCst);
    let movable: u64 = candidates.iter().map(|(_, size)| size).sum();
    if used.saturating_add(size).saturating_sub(movable) > quota {
        // Moving every candidate out would still leave too little room.
        return false;
    }
    // The bytes missing under the quota and under the pool's budget move
    // out together, so that each is remapped while the next ones copy.
    let short = used
        .saturating_add(size)
        .saturating_sub(quota)
        .max(size.saturating_sub(crate::policy::moves::pool_room(state, device)));
    let mut victims = by_next_use(state, candidates).into_iter();
    let mut staged = Vec::new();
    let mut freeing = 0;
    while freeing < short {
        let Some((_, victim, ptr)) = victims.next() else {
            break;
        };
        if !strict && !uses::wait_idle(state, ptr) {
            continue;
        }
        if let Some(out) = moves::stage_out(state, ptr, victim) {
            staged.push(out);
            freeing += victim;
        }
    }
    state.tier.out_for_room.fetch_add(freeing, Relaxed);
    moves::finish(state, staged);
    if state.ledger.try_reserve(device, size, quota) {
        return true;
    }
    // A move failed, or the room went elsewhere: one more at a time.
    for (_, victim, ptr) in victims {
        if !strict && !uses::wait_idle(state, ptr) {
            continue;
        }
        if !move_out(state, ptr, victim) {
            continue;
        }
        state.tier.out_for_room.fetch_add(victim, Relaxed);
        if state.ledger.try_reserve(device, size, quota) {
            return true;
        }
    }
    false
}
