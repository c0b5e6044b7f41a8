//! Blocks brought onto the device ahead of need. Where the job marks its
//! steps and moves overlap the job's kernels, the step before's record
//! ([`crate::state::access::replay`]) names the blocks the next uses will
//! name. After each use, those of them in host memory come onto the device,
//! the soonest first, into the room there is: each one's copy is queued on
//! the tier's stream, and the work that names it waits for that copy on the
//! device ([`super::uses`]), so the job's thread waits for nothing.
//!
//! Nothing is moved out for them here. The room they take is made again as
//! after any move in ([`super::room::evict_ahead`]), by the mover thread,
//! from blocks whose next use lies past what was looked at: a block brought
//! ahead is not pushed out for one needed later than it.
//!
//! A prediction that is wrong costs link traffic and room, never
//! correctness: a block is brought only once its last use has completed,
//! as any move beside the kernels.

use std::sync::atomic::Ordering::Relaxed;

use vramshare_common::event::{Api, Placement};

use crate::cuda::backend::Backend;
use crate::state::State;

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

/// After the moves for a use that named `named`, where uses are recorded
/// ([`recording`]): brings the blocks the next uses will name onto the
/// device, where there is room.
pub(super) fn bring(state: &'static State, api: Api, named: &[usize]) {
    let replay = &state.access.replay;
    if state.tier.bytes_in_host.load(Relaxed) == 0 {
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
    let backend = Backend::of(api);
    let Ok(device) = backend.current_device() else {
        return;
    };
    let Some(quota) = device_quota(state, device, backend) else {
        return;
    };
    let bound = limit(state, device, Some(quota)).unwrap_or(quota);
    let Some(_closed) = state.tier.gate.close() else {
        return;
    };
    let _timed = Timed(state, std::time::Instant::now());
    let mut staged: Vec<Staged> = Vec::new();
    let mut looked = last + 1;
    for (distance, start) in upcoming {
        let Some(block) = state.ledger.block_at(start) else {
            continue;
        };
        let comes = block.tiered
            && !block.moving
            && block.placement == Placement::Host
            && block.device == device
            && block.size <= bound / 2;
        // A block still read in place by work queued is left to come when
        // work names it: what was looked at is not looked at again.
        if !comes || !uses::idle(state, start) {
            continue;
        }
        if !state.ledger.try_reserve(device, block.size, quota) {
            // No room yet: looked at again once blocks have moved out.
            looked = distance;
            break;
        }
        if let Some(move_in) = moves::stage_in(state, start, block, true) {
            state.tier.ahead_moves.fetch_add(1, Relaxed);
            state.tier.ahead_bytes.fetch_add(block.size, Relaxed);
            staged.push(move_in);
        }
    }
    replay.looked_to(looked);
    let (came, short) = (!staged.is_empty(), looked <= last);
    moves::finish(state, staged);
    if came {
        state.tier.fetches.fetch_add(1, Relaxed);
    }
    if came || short {
        // The room they took is made again, from blocks needed later.
        let out = room::evict_ahead(state, device, bound, named, false);
        moves::finish(state, out);
    }
}
