//! Groups of a step's allocations held in one tier block: where the job
//! marks its steps, the stream-ordered allocations that the step before
//! made one after another and freed together (a layer's saved tensors,
//! [`crate::state::access::groups`]) are made as one block of their bytes
//! together at the first of them, and the others take their places inside
//! it, with no call of the driver's. The block moves as one (one copy
//! each way, one handle's calls to make, map and give back), and is freed
//! once its last member is.
//!
//! The block counts its whole bytes from its first member on: the ledger
//! knows the block, not its members. Each member's free records an event
//! on its stream, which the group's own free waits for where it is on
//! another stream, so that memory handed out again after the group's free
//! follows every member's free. Where the step differs from the step before (an
//! allocation of another size where a member was to come), the group takes
//! no more members and the room left in it stays unused until it is freed.

use vramshare_common::event::Api;

use crate::state::access::groups::Rules;
use crate::state::grouped::{Freed, MemberFree, Planned};
use crate::state::State;

use super::backing::PAGE;
use super::kept::{record, stream_key};
use super::uses::Event;

/// How a step's allocations are grouped: blocks of whole pages living at
/// least 64 of the step's allocations and frees, freed within 32 of their
/// group's first, groups of at most 256 MiB (counted on the LM's and
/// ResNet-50's steps, five blocks a group on average: `bench/step-groups`).
pub const RULES: Rules = Rules {
    least: PAGE,
    min_life: 64,
    spread: 32,
    cap: 256 << 20,
    page: PAGE,
};

/// The most a group may hold of the tier's limit: an eighth, so that room
/// for one group is no more than a block's moves can make.
const LIMIT_SHARE: u64 = 8;

/// A groupable allocation under way: its number in the step, the group it
/// begins (if it does), and its stream's key.
pub struct Allocation {
    number: u32,
    pub begins: Option<Planned>,
    stream: usize,
}

/// Where groups are made: moves overlap the job's kernels and the job
/// marks its steps, as where uses are recorded ([`super::ahead::recording`]),
/// but counted from the first marked step's first allocation, which may
/// come before the tier has any block.
fn on(state: &State) -> bool {
    super::uses::overlapping() && state.access.steps.marked()
}

/// A stream-ordered allocation of the tier's `size` by `api` on `stream`
/// begins, under the tier's `limit`: counted in the step's record, where
/// groups are made.
pub fn begin(state: &State, api: Api, size: u64, stream: usize, limit: u64) -> Option<Allocation> {
    if !on(state) {
        return None;
    }
    let grouped = &state.tier.grouped;
    let most = limit / LIMIT_SHARE;
    let number = grouped.number(size, most);
    let begins = grouped.planned(number, size, most);
    Some(Allocation {
        number,
        begins,
        stream: stream_key(api, stream),
    })
}

/// The allocation's place in the group being filled, if it is the member
/// to come there.
pub fn place(state: &State, allocation: &Allocation, size: u64) -> Option<usize> {
    let grouped = &state.tier.grouped;
    let start = grouped.place(allocation.number, size, allocation.stream)?;
    grouped.handed(allocation.number, start);
    state
        .tier
        .grouped_members
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(start)
}

/// The allocation was handed out at `start`: a block of its own, or the
/// block of the group it begins.
pub fn handed(state: &State, allocation: Allocation, start: usize) {
    let grouped = &state.tier.grouped;
    grouped.handed(allocation.number, start);
    if let Some(planned) = allocation.begins {
        grouped.made(start, planned, allocation.stream);
        state
            .tier
            .groups_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The job began a step: the step that ended plans the next one's groups.
pub fn step(state: &State) {
    state.tier.grouped.step(&RULES);
}

/// What a free of a group's member leaves for the caller.
pub enum Member {
    /// Not a member: the free goes on as any other.
    No,
    /// Others of its group live on: the free is done.
    Done,
    /// A second free of a member whose group lives on: refused.
    Again,
    /// The last of its group: the group's block at this start is freed
    /// in its place, on the free's stream.
    Last(usize),
    /// As `Last`, where a member was freed while a stream was captured:
    /// the graph may use the block whenever it runs, so it is kept as a
    /// block freed in a capture is ([`super::captured`]).
    LastHeld(usize),
}

/// A free of `ptr` by `api` (on `stream` if stream-ordered): noted in the
/// step's record, and if `ptr` is a group's member, what it leaves.
pub fn free(state: &State, api: Api, ptr: usize, stream: Option<usize>) -> Member {
    if !state.tier.active.load(std::sync::atomic::Ordering::Relaxed) {
        return Member::No;
    }
    let grouped = &state.tier.grouped;
    if !grouped.freed(ptr) {
        return Member::No;
    }
    // Each member's free is recorded on its stream, so that the group's own
    // free, on whichever stream, follows all of them; a `cudaFree` waits
    // for the device, as CUDA's does. Not while a stream is captured: the
    // record would be the graph's, and the group is never handed out again.
    let capturing = state.access.graphs.capturing_any();
    let drain = || {
        if let Err(rc) = super::backing::drain(api) {
            debug!("waiting for the device at a grouped block's free: CUDA error {rc}");
        }
    };
    let event = match stream {
        _ if capturing => None,
        Some(stream) => match record(state, api, stream) {
            Some((event, runtime)) => Some(MemberFree {
                event,
                runtime,
                stream: stream_key(api, stream),
            }),
            None => {
                drain();
                None
            }
        },
        None => {
            drain();
            None
        }
    };
    let give_back =
        |free: MemberFree| super::kept::give_back_event(state, free.event, free.runtime);
    match grouped.free_member(ptr, event, capturing) {
        None => {
            event.map(give_back);
            Member::No
        }
        Some(Freed::Again) => {
            event.map(give_back);
            Member::Again
        }
        Some(Freed::Kept) => Member::Done,
        Some(Freed::Last { base, frees, held }) => {
            let key = stream.map(|stream| stream_key(api, stream));
            for free in frees {
                let ordered = key.is_some_and(|key| key != 0 && key == free.stream);
                if !held && !ordered {
                    let event = Event(free.event, free.runtime);
                    match stream {
                        Some(stream) => event.order(stream, api.is_per_thread()),
                        None => {
                            event.wait();
                        }
                    }
                }
                give_back(free);
            }
            if held {
                Member::LastHeld(base)
            } else {
                Member::Last(base)
            }
        }
    }
}
