//! Tier blocks freed in stream order while a stream is captured. In CUDA
//! the free would be a node of the graph, made each time the graph runs;
//! here no free reaches CUDA (the block is the tier's virtual memory), so
//! the block stays whole, mapped and counted while anything may use it:
//! the capture's graph and each executable graph made from it hold it
//! ([`crate::state::access::graphs`]). Once the last of them is destroyed,
//! it is given back as a `cudaFree` gives a block back, when the capture's
//! end on its stream (work given there before the capture) and each
//! executable graph's last launch are reached: events recorded there say
//! when, so that nothing waits for them.
//!
//! Kept for good instead: a block freed on a stream the shim did not see
//! begin a capture (its capture, if any, is not known), and what an
//! executable graph holds once it is launched while a stream is captured
//! (it may have been launched into that capture, and become part of
//! another graph) or an event cannot be recorded after its launch.

use vramshare_common::event::Api;

use crate::cuda::backend::Backend;
use crate::state::access::graphs::{EventHandle, Freed};
use crate::state::tier::Backing;
use crate::state::State;

use super::kept::{give_back_event, record};
use super::uses::Event;

/// The tier block at `ptr` (`backing`), which the ledger has let go of,
/// freed in stream order on `stream` while a stream is captured.
pub(super) fn park(state: &State, ptr: usize, backing: Backing, stream: usize) {
    if let Err(backing) = state.access.graphs.freed(stream, ptr, backing) {
        let freed = Freed {
            blocks: vec![(ptr, backing)],
            after: Vec::new(),
            for_good: true,
        };
        state.tier.freed_in_capture.push(freed);
    }
}

/// The capture on `stream` ended by `api` in `graph` (null if it failed):
/// the graph holds what was freed on it, after the work given on the
/// stream before the capture.
pub fn ended(state: &State, api: Api, stream: usize, graph: usize) {
    let blocks = state.access.graphs.end_capture(stream, graph);
    if blocks.is_empty() {
        return;
    }
    let mut freed = Freed {
        blocks,
        ..Freed::default()
    };
    match record(state, api, stream) {
        Some(event) => freed.after.push(event),
        None => {
            debug!("recording an event as a capture ended failed; the blocks freed in it are kept for good");
            freed.for_good = true;
        }
    }
    unheld(state, state.access.graphs.hold(graph, freed));
}

/// After a launch of the executable graph `exec` by `api` on `stream`: if
/// it holds what a capture freed, an event is recorded after the launch.
pub fn launched(state: &State, api: Api, exec: usize, stream: usize) {
    let capturing = state.access.graphs.capturing_any();
    state.access.graphs.launched(exec, |last| {
        if capturing {
            if let Some((event, runtime)) = last {
                give_back_event(state, event, runtime);
            }
            return None;
        }
        let followed = follow(state, api, stream, last);
        if followed.is_none() {
            debug!("recording an event after a graph's launch failed; the blocks freed in its capture are kept for good");
        }
        followed
    });
}

/// An event recorded on `stream` in the form `api` uses: `held` again if
/// it is of that API, else a new one (`held` is given back). `None` if
/// CUDA refused.
fn follow(
    state: &State,
    api: Api,
    stream: usize,
    held: Option<EventHandle>,
) -> Option<EventHandle> {
    let runtime = Backend::of(api) == Backend::Runtime;
    if let Some((event, of_runtime)) = held {
        if of_runtime == runtime && Event(event, runtime).record(stream, api.is_per_thread()) {
            return held;
        }
        give_back_event(state, event, of_runtime);
    }
    record(state, api, stream)
}

/// What a capture freed that nothing holds any more (`freed`, if a graph
/// or executable graph let it go) is given back once its events are
/// reached.
pub fn unheld(state: &State, freed: Option<Freed>) {
    if let Some(freed) = freed {
        state.tier.freed_in_capture.push(freed);
    }
    settle(state);
}

/// Gives back the blocks that no graph holds whose events are reached.
/// Not while a stream is captured: no event is asked about and no memory
/// unmapped then, since either could end the capture in error.
#[inline]
pub(super) fn settle(state: &State) {
    if !state.tier.freed_in_capture.looks_empty() {
        give_back_reached(state);
    }
}

/// [`settle`] while a capture's frees wait: out of line, so that a use
/// while none do skips its code.
#[inline(never)]
fn give_back_reached(state: &State) {
    if state.access.graphs.capturing_any() {
        return;
    }
    let reached = state.tier.freed_in_capture.with(|list| {
        let mut reached = Vec::new();
        let mut index = 0;
        while index < list.len() {
            if all_reached(&list[index]) {
                reached.push(list.swap_remove(index));
            } else {
                index += 1;
            }
        }
        reached
    });
    for freed in reached {
        give_back(state, freed);
    }
}

/// Whether nothing can touch `freed`'s blocks: its events are reached, and
/// each block's last use recorded (where moves overlap the job's kernels,
/// a copy onto the device may still be landing) has completed.
fn all_reached(freed: &Freed) -> bool {
    !freed.for_good
        && freed
            .after
            .iter()
            .all(|&(event, runtime)| Event(event, runtime).complete())
        && freed
            .blocks
            .iter()
            .all(|(_, backing)| super::uses::idle_backing(backing))
}

/// Unmaps and releases blocks that no work can touch any more, and gives
/// their device bytes back to the count, as a kept block's release does.
fn give_back(state: &State, freed: Freed) {
    for (ptr, backing) in &freed.blocks {
        super::dismantle(state, *ptr, backing, true);
        if backing.on_device != 0 {
            state.ledger.unreserve(backing.device, backing.size);
        }
    }
    for (event, runtime) in freed.after {
        give_back_event(state, event, runtime);
    }
}
