//! Blocks brought onto the device ahead of need. Where the job marks its
//! steps and moves overlap the job's kernels, the step before's record
//! ([`crate::state::access::replay`]) names the blocks the next uses will
//! name. After each use, those of them in host memory come onto the device,
//! the soonest first, into the room there is: each one's copy is queued on
//! the tier's stream, and the work that names it waits for that copy on the
//! device ([`super::uses`]), so the job's thread waits for nothing.
//!
//! No block is moved out to make room for them: they take only room that
//! is free beyond the move budget ([`super::room::spare_beyond_budget`]),
//! of the room made free whenever a block a use names comes in (twice the
//! budget while they come), so that a block a use names still finds room
//! at once, or else the memory of a block of their size freed in stream
//! order and kept for reuse, their copy waiting on the device for that
//! free ([`super::room::lender`]): in a backward pass the freed activations'
//! kept blocks fill the quota, their frees queued behind the job's
//! launches, while the blocks it will need wait in host memory.
//! Pushing blocks out for them was measured to cost more than it saved:
//! those blocks had to be pinned and copied out in the same chain as the
//! moves they made room for.
//!
//! The same record keeps the point of the step where the live blocks
//! required the most bytes out of the device (those in host memory, less
//! the room that held no live block): until that point, blocks whose next
//! use lies past it go out as soon as nothing uses them ([`out_for_peak`]),
//! so that the moves out a forward pass would wait for begin while the
//! quota has room, and no more go than the live blocks required.
//!
//! A prediction that is wrong costs link traffic and room, never
//! correctness: a block is brought only once its last use has completed,
//! as any move beside the kernels.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use vramshare_common::event::{Api, Placement};

use crate::config::Device;
use crate::cuda::backend::Backend;
use crate::state::access::replay::Peak;
use crate::state::State;

use super::backing::Direction;
use super::moves::{self, Staged};
use super::{limit, room, uses, Timed};
use crate::policy::quota::device_quota;

/// How far ahead blocks are brought: this share of the step before's uses
/// (1/8), and at least [`AHEAD_LEAST`] uses.
const AHEAD_DIVISOR: usize = 8;
const AHEAD_LEAST: usize = 16;

/// The most blocks looked at after one use: the rest wait for the next.
const LOOKED_AT_ONCE: usize = 32;

/// Whether uses are recorded for the step that follows: moves overlap the
/// job's kernels, the job marks its steps, and the tier has blocks.
pub fn recording(state: &State) -> bool {
    uses::overlapping() && state.access.steps.marked() && state.tier.active.load(Relaxed)
}

/// After the moves for a use, where uses are recorded ([`recording`]):
/// notes the bytes the live blocks require out of the device and hands
/// blocks next used past the step's peak to the mover thread
/// ([`out_for_peak`]), and brings the blocks the next uses will name onto
/// the device, where there is room to spare.
pub(super) fn bring(state: &'static State, api: Api) {
    let replay = &state.access.replay;
    let in_host = state.tier.bytes_in_host.load(Relaxed);
    // The calling thread's device and limits, asked of CUDA once for both.
    let limits = device_limits(state, api);
    if let Some((device, _, bound)) = limits {
        out_for_peak(state, device, bound, in_host);
    }
    if in_host == 0 {
        state.tier.ahead_coming.store(false, Relaxed);
        return;
    }
    // After a launch the shim could not read, the next move drains the
    // device: nothing comes ahead until then.
    if state.tier.unread_since_drain.load(Relaxed) || state.access.graphs.capturing_any() {
        return;
    }
    let ahead = (replay.length() / AHEAD_DIVISOR).max(AHEAD_LEAST);
    let upcoming = replay.upcoming(ahead, LOOKED_AT_ONCE);
    let Some(&(last, _)) = upcoming.last() else {
        return;
    };
    let Some((device, quota, bound)) = limits else {
        return;
    };
    let Some(_closed) = state.tier.gate.close() else {
        return;
    };
    // Asked again behind the gate: a use may have gone unrecorded since.
    if state.tier.unread_since_drain.load(SeqCst) {
        return;
    }
    let _timed = Timed(state, std::time::Instant::now());
    let tier = &state.tier;
    tier.ahead_looks.fetch_add(1, Relaxed);
    let mut staged: Vec<Staged> = Vec::new();
    let mut spare = room::spare_beyond_budget(state, device, bound);
    let mut looked = last + 1;
    let mut found = false;
    for (distance, start) in upcoming {
        let Some(block) = state.ledger.block_at(start) else {
            continue;
        };
        let comes = block.tiered
            && !block.moving
            && block.placement == Placement::Host
            && block.device == device
            && block.size <= bound / 2;
        if !comes {
            continue;
        }
        found = true;
        // A block still read in place by work queued is left to come when
        // work names it: what was looked at is not looked at again.
        if !uses::idle(state, start) {
            tier.ahead_passed_busy.fetch_add(1, Relaxed);
            continue;
        }
        let move_in = if block.size <= spare && state.ledger.try_reserve(device, block.size, quota)
        {
            spare -= block.size;
            moves::stage_in(state, start, block, true)
        } else if let Some(lender) = room::lender(state, device, block.size, quota) {
            moves::stage_in_lent(state, start, block, lender, Direction::AheadAfterFree)
        } else {
            // No room to spare: looked at again after a later use, once
            // room has been made for a block a use names.
            tier.ahead_short_of_room.fetch_add(1, Relaxed);
            looked = distance;
            break;
        };
        if let Some(move_in) = move_in {
            tier.ahead_moves.fetch_add(1, Relaxed);
            tier.ahead_bytes.fetch_add(block.size, Relaxed);
            staged.push(move_in);
        }
    }
    if !found {
        tier.ahead_none_in_host.fetch_add(1, Relaxed);
    }
    tier.ahead_coming.store(found, Relaxed);
    replay.looked_to(looked);
    let came = !staged.is_empty();
    moves::finish(state, staged);
    if came {
        state.tier.fetches.fetch_add(1, Relaxed);
    }
}

/// How often, in uses, blocks are looked for to go out before the peak:
/// choosing them looks at every block on the device.
const PEAK_LOOK_EVERY: u64 = 16;

/// Before the point of the step where the live blocks of the step before
/// required the most bytes out of the device: while fewer are in host
/// memory or leaving, and the mover thread has few moves to make, the
/// blocks next used past that point go out as soon as nothing uses them
/// ([`room::out_for_peak`]), every [`PEAK_LOOK_EVERY`]th use. What the live
/// blocks require is noted after every use: a large block that lives for a
/// few uses only (a model's logits) makes the step's peak.
fn out_for_peak(state: &'static State, device: Device, bound: u64, in_host: u64) {
    static USES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // The bytes the live blocks require out of the device: those in host
    // memory, less the room that holds no live block (free, or held by
    // kept blocks, which give it back without a copy) beyond a margin. The
    // kept blocks are counted only where the free room alone leaves that
    // above the step's most so far.
    let replay = &state.access.replay;
    let beyond = in_host.saturating_add(room::peak_margin(bound));
    let free = room::free_under(state, device, bound);
    if beyond.saturating_sub(free) > replay.out_needed_most() {
        let kept = super::kept::on_device(state, device);
        replay.note_out_needed(beyond.saturating_sub(free.saturating_add(kept)));
    }
    if !USES.fetch_add(1, Relaxed).is_multiple_of(PEAK_LOOK_EVERY) {
        return;
    }
    if state.tier.outgoing.pending.load(Relaxed) >= super::mover::BATCH as u64
        || state.tier.unread_since_drain.load(Relaxed)
        || state.access.graphs.capturing_any()
    {
        return;
    }
    let Peak::Ahead {
        bytes: most,
        uses: distance,
    } = replay.out_needed_peak()
    else {
        return;
    };
    let leaving = super::mover::leaving(state, device);
    let Some(bytes) = most
        .checked_sub(in_host.saturating_add(leaving))
        .filter(|b| *b > 0)
    else {
        return;
    };
    let Some(_closed) = state.tier.gate.close() else {
        return;
    };
    if state.tier.unread_since_drain.load(SeqCst) {
        return;
    }
    let _timed = Timed(state, std::time::Instant::now());
    let sent = room::out_for_peak(state, device, bound, bytes, distance);
    state.tier.out_before_peak.fetch_add(sent, Relaxed);
}

/// Where steps are recorded: whether what the step before's live blocks
/// required out of `device` at the step's peak is in host memory or
/// leaving, or the step is past that peak. Room made beyond that point
/// sends out blocks the backward pass brings straight back. False before a
/// step has noted what it required.
pub(super) fn out_enough_for_peak(state: &State, device: Device) -> bool {
    let replay = &state.access.replay;
    if !recording(state) {
        return false;
    }
    match replay.out_needed_peak() {
        Peak::Unknown => false,
        Peak::Passed => true,
        Peak::Ahead { bytes, .. } => {
            let in_host = state.tier.bytes_in_host.load(Relaxed);
            in_host.saturating_add(super::mover::leaving(state, device)) >= bytes
        }
    }
}

/// The calling thread's device, its quota, and the limit under it that
/// the tier holds its blocks to (the quota, or the pool's budget where
/// that is lower).
fn device_limits(state: &State, api: Api) -> Option<(Device, u64, u64)> {
    let backend = Backend::of(api);
    let device = backend.current_device().ok()?;
    let quota = device_quota(state, device, backend)?;
    Some((
        device,
        quota,
        limit(state, device, Some(quota)).unwrap_or(quota),
    ))
}
