//! Where moves overlap the job's kernels, each use of a tier block records
//! the block's event after it ([`super::uses`]): a CUDA call or two for
//! every launch, copy and library call that names one. A job that fits its
//! quota, or whose blocks have all come back, pays that on every call for
//! moves that never come; a job of many small kernels (a recommendation
//! model's lookups) runs measurably slower for it.
//!
//! So the tier goes quiet once a look at it, made every [`LOOK_EVERY`]
//! uses that name its blocks, finds no round of moves since the look
//! before, no block in host memory, the mover thread with nothing to move,
//! and the copies onto the device landed: uses are then let through
//! unrecorded, as a launch whose parameters could not be read is
//! ([`super::uses::unread`]). The next move drains the device first, which
//! every unrecorded use has then finished, and ends the quiet ([`ended`]).
//! Nothing moves beside the kernels meanwhile: each way a block goes out
//! beside them checks for an unread use behind the closed gate (the mover
//! thread is handed moves only there), and a use enters the gate before it
//! is let through. While a block is in host memory (made there, say, for
//! want of room), uses are recorded again, so that after the drain the
//! blocks they name may move beside the kernels as before. A new block
//! that finds no room under the quota while the tier is quiet drains the
//! device and makes its room ([`super::room_for_new`]) rather than going
//! to host memory.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use vramshare_common::event::Api;

use crate::cuda::backend::Backend;
use crate::state::State;

use super::backing::{self, Direction};

/// The uses naming the tier's blocks between two looks at whether it may
/// go quiet, which needs no round of moves between them: thousands, so
/// that a job whose blocks move every step (a step has thousands of
/// launches) does not go quiet between its moves.
pub const LOOK_EVERY: u64 = 4096;

/// Whether the use by `api` that names tier blocks may go unrecorded;
/// called inside the gate, where moves are tracked. Looks at whether the
/// tier may go quiet every [`LOOK_EVERY`] uses.
pub fn unrecorded(state: &State, api: Api) -> bool {
    let tier = &state.tier;
    if tier.quiet.load(SeqCst) {
        return nothing_can_move(state);
    }
    if !(tier.uses_looked.fetch_add(1, Relaxed) + 1).is_multiple_of(LOOK_EVERY) {
        return false;
    }
    let rounds = tier.fetches.load(Relaxed);
    let before = tier.rounds_at_look.swap(rounds, Relaxed);
    if rounds != before || !nothing_can_move(state) {
        return false;
    }
    // Blocks that came in may still be landing: the event of each stands
    // for its copy until a use is recorded after it. Every copy onto the
    // device landed, no unrecorded use can run before one.
    if tier.moves_in.load(Relaxed) > 0 && !copies_in_landed(api) {
        return false;
    }
    tier.unread_since_drain.store(true, SeqCst);
    tier.quiet.store(true, SeqCst);
    tier.quiet_entered.fetch_add(1, Relaxed);
    true
}

/// No block in host memory, none handed to the mover thread.
fn nothing_can_move(state: &State) -> bool {
    state.tier.bytes_in_host.load(SeqCst) == 0 && state.tier.outgoing.pending.load(SeqCst) == 0
}

/// Waits for the copies queued onto the calling thread's device; false if
/// a wait failed.
fn copies_in_landed(api: Api) -> bool {
    let Ok(device) = Backend::of(api).current_device() else {
        return false;
    };
    Direction::IN
        .iter()
        .all(|direction| backing::wait(device, *direction).is_ok())
}

/// Whether the tier is quiet: uses may have gone unrecorded since the
/// device was last drained.
pub fn quiet(state: &State) -> bool {
    state.tier.quiet.load(SeqCst)
}

/// The device drained behind the closed gate: every use let through
/// unrecorded has finished, and uses are recorded again. Whether the tier
/// was quiet.
pub fn ended(state: &State) -> bool {
    let tier = &state.tier;
    let was = tier.quiet.swap(false, SeqCst);
    if was {
        // The next look, LOOK_EVERY uses on, looks for rounds after this
        // one (whose drain is counted already).
        tier.uses_looked.store(0, Relaxed);
        tier.rounds_at_look
            .store(tier.fetches.load(Relaxed), Relaxed);
    }
    was
}
