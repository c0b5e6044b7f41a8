//! Moves out as a marked step begins. A training step's forward makes what
//! the quota cannot hold, so blocks go out during it; made as room runs
//! short, those moves began only once the room kept free was used up (60 ms
//! into a GPT-2 step on the H200), the link idle until then, and from there
//! the forward's allocations waited for them.
//!
//! So, as the job marks a step and moves overlap the job's kernels, the
//! blocks on the device that the step before first named in its second
//! half (an optimizer's state, say) go to the mover thread, the furthest
//! first, each only once its last use has completed, and at most as many
//! bytes as the step before moved out. Such blocks would be the first to go
//! when room is made during the step (their next use is the furthest); now
//! they cross while the link is idle and the step's first kernels run.
//!
//! A prediction that is wrong costs link traffic, never correctness: work
//! that names a block before its move begins claims it back, and a block
//! gone out comes in when work names it, as any move beside the kernels
//! ([`super::mover`], [`super::uses`]).

use std::sync::atomic::Ordering::Relaxed;

use crate::cuda::backend::Backend;
use crate::state::State;

use super::moves::timed;
use super::{ahead, mover, uses, Timed};

/// The step begins now, the job says: hands the blocks the step before
/// first named late to the mover thread, as the module says.
pub fn at_step(state: &'static State) {
    let tier = &state.tier;
    let moved_out = tier.moved_out.load(Relaxed);
    let before = tier.moved_out_at_step.swap(moved_out, Relaxed);
    let budget = moved_out.saturating_sub(before);
    let length = state.access.replay.length() as u64;
    if budget == 0 || length == 0 || !ahead::recording(state) {
        return;
    }
    // After a launch the shim could not read, only a drained device moves
    // blocks; a wait for the device would end a capture.
    if tier.unread_since_drain.load(Relaxed) || state.access.graphs.capturing_any() {
        return;
    }
    // The moves are for the calling thread's device, asked through the API
    // the tier's blocks were made by.
    let Some(api) = (tier.blocks.iter().next())
        .and_then(|entry| state.ledger.block_at(*entry.key()))
        .map(|block| block.api)
    else {
        return;
    };
    let Ok(device) = Backend::of(api).current_device() else {
        return;
    };
    let Some(_closed) = tier.gate.close() else {
        return;
    };
    let _timed = Timed(state, std::time::Instant::now());
    let late = timed(&tier.choose_ns, || {
        let idle: Vec<(usize, u64)> = (state.ledger.tier_on_device(device).into_iter())
            .filter(|(ptr, _)| uses::known(state, *ptr) && uses::idle(state, *ptr))
            .collect();
        let starts: Vec<usize> = idle.iter().map(|(ptr, _)| *ptr).collect();
        let next = state.access.replay.next_uses(&starts);
        first_named_late(idle, next, length)
    });
    let mut sent = 0;
    for (size, ptr) in late {
        if sent + size > budget {
            continue;
        }
        if mover::send(state, ptr, size) {
            sent += size;
            tier.early_out_moves.fetch_add(1, Relaxed);
            tier.early_out_bytes.fetch_add(size, Relaxed);
        }
    }
}

/// Of `blocks` (start, size), with the uses from the step's start to each
/// one's first use in the step before (`next`; `None`: never named), those
/// first named in the second half of its `length` uses, as (size, start),
/// the latest first (of equals, the largest).
fn first_named_late(
    blocks: Vec<(usize, u64)>,
    next: Vec<Option<u64>>,
    length: u64,
) -> Vec<(u64, usize)> {
    let mut late: Vec<(u64, u64, usize)> = blocks
        .into_iter()
        .zip(next)
        .filter_map(|((ptr, size), next)| next.filter(|n| 2 * n >= length).map(|n| (n, size, ptr)))
        .collect();
    late.sort_unstable_by(|a, b| b.cmp(a));
    late.into_iter().map(|(_, size, ptr)| (size, ptr)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blocks_first_named_in_the_second_half_go_the_latest_first() {
        let blocks = vec![(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)];
        // Of ten uses: first named at 0, 9, 5, never, 4.
        let next = vec![Some(0), Some(9), Some(5), None, Some(4)];
        assert_eq!(first_named_late(blocks, next, 10), vec![(20, 2), (30, 3)]);
        // Of equal distance, the larger first.
        let ties = first_named_late(vec![(1, 4), (2, 8)], vec![Some(3), Some(3)], 6);
        assert_eq!(ties, vec![(8, 2), (4, 1)]);
    }
}
