//! The tier's groups: several of a step's allocations held in one block,
//! one after another, so that one move carries them all and one handle's
//! calls make and give back their memory ([`super::access::groups`] says
//! which allocations, from the step before).
//!
//! This keeps, under one lock: the step under way's record of its
//! groupable allocations (stream-ordered ones of the tier's sizes: their
//! order, sizes, and when each was made and freed, in operations counted
//! from the step's start: the groupable allocations and every free the
//! shim sees once the tier has blocks); the plan the step before's
//! record gave (which allocation, by its number in the step, begins a
//! group, and the group's members); the group being filled; and the live
//! groups, with the allocations each holds. The policy
//! ([`crate::policy::tier::grouped`]) decides; this only counts.

use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::Mutex;

use super::access::groups::{groups, Made, Rules};
use super::lock;

/// A group the plan begins at one allocation: its bytes (whole pages), and
/// its members after the first, by number, size and offset in the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub bytes: u64,
    pub first_size: u64,
    pub rest: Vec<Slot>,
}

/// A member's place in its group: the allocation's number in the step,
/// its size, and where in the group it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub number: u32,
    pub size: u64,
    pub offset: u64,
}

/// A live group: its members handed out and not yet freed, the stream
/// (key) it was made on, the events recorded at its members' frees (with
/// the key of each one's stream), for the group's own free to wait on, and
/// whether a member was freed while a stream was captured (the graph may
/// use it whenever it runs: the group is never handed out again).
#[derive(Debug)]
struct Live {
    members: u32,
    stream: usize,
    frees: Vec<MemberFree>,
    held: bool,
}

/// An event recorded at a member's free: its handle, whether it is the
/// runtime's, and the key of the stream it was recorded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberFree {
    pub event: usize,
    pub runtime: bool,
    pub stream: usize,
}

/// The group being filled: its start, and the members still to come.
#[derive(Debug)]
struct Filling {
    base: usize,
    rest: VecDeque<Slot>,
}

/// What a member's free leaves.
#[derive(Debug, PartialEq, Eq)]
pub enum Freed {
    /// Others of its group live on: nothing more to do.
    Kept,
    /// It was the group's last: the group at `base` is freed, after the
    /// events `frees` (recorded at its members' frees); `held` if a graph
    /// may still use it.
    Last {
        base: usize,
        frees: Vec<MemberFree>,
        held: bool,
    },
    /// The group's start, whose member was freed already while others of
    /// its group live on: a second free of one allocation.
    Again,
}

#[derive(Default)]
struct Inner {
    /// Operations (groupable allocations and frees) in the step so far.
    clock: u32,
    /// The step's groupable allocations, in order, and each one's index
    /// there by the start it was handed out at.
    made: Vec<Made>,
    index_of: HashMap<usize, usize>,
    /// From the step before: the groups that begin at each number.
    plan: HashMap<u32, Planned>,
    filling: Option<Filling>,
    live: HashMap<usize, Live>,
    /// Each member handed out, by its start: its group's start.
    member_of: HashMap<usize, usize>,
    /// The most bytes a group may hold, as the step's allocations last
    /// said (0: none said yet).
    most: u64,
}

impl Inner {
    /// Whether `start` is a live group's member, or its start (whose
    /// member may be freed already).
    fn holds(&self, start: usize) -> bool {
        self.member_of.contains_key(&start) || self.live.contains_key(&start)
    }
}

/// The most allocations a step's record holds: past that, the step is not
/// grouped (a step of more is not a training loop's).
const MAX_MADE: usize = 1 << 16;

#[derive(Default)]
pub struct Grouped {
    inner: Mutex<Inner>,
}

impl Grouped {
    /// A groupable allocation of `size` bytes begins, where a group may
    /// hold at most `most` bytes: its number in the step (whatever becomes
    /// of it, so that numbers match the step before's).
    pub fn number(&self, size: u64, most: u64) -> u32 {
        let mut inner = lock(&self.inner);
        inner.most = most;
        let number = inner.made.len() as u32;
        if inner.made.len() < MAX_MADE {
            let made_at = inner.clock;
            inner.made.push(Made {
                size,
                made_at,
                freed_at: None,
            });
        }
        inner.clock = inner.clock.saturating_add(1);
        number
    }

    /// The allocation numbered `number` was handed out at `start`.
    pub fn handed(&self, number: u32, start: usize) {
        let mut inner = lock(&self.inner);
        if (number as usize) < inner.made.len() {
            inner.index_of.insert(start, number as usize);
        }
    }

    /// A free of the block or member at `start` (any free: those not
    /// recorded this step are not counted); whether `start` is a live
    /// group's ([`Inner::holds`]), in the same hold of the lock.
    pub fn freed(&self, start: usize) -> bool {
        let mut inner = lock(&self.inner);
        inner.clock = inner.clock.saturating_add(1);
        let clock = inner.clock;
        if let Some(index) = inner.index_of.remove(&start) {
            inner.made[index].freed_at = Some(clock);
        }
        inner.holds(start)
    }

    /// The group the plan begins at allocation `number` of `size` bytes,
    /// if it has one of at most `most` bytes.
    pub fn planned(&self, number: u32, size: u64, most: u64) -> Option<Planned> {
        let inner = lock(&self.inner);
        let planned = inner.plan.get(&number)?;
        (planned.first_size == size && planned.bytes <= most).then(|| planned.clone())
    }

    /// The group `planned` was made at `base`, on `stream` (key): its
    /// first member is handed out there, and the rest are to come.
    pub fn made(&self, base: usize, planned: Planned, stream: usize) {
        let mut inner = lock(&self.inner);
        inner.live.insert(
            base,
            Live {
                members: 1,
                stream,
                frees: Vec::new(),
                held: false,
            },
        );
        inner.member_of.insert(base, base);
        inner.filling = Some(Filling {
            base,
            rest: planned.rest.into(),
        });
    }

    /// The place for allocation `number` of `size` bytes on `stream` (key)
    /// in the group being filled, if it is the member to come there, on
    /// the group's own stream (the group's memory may be a kept block whose
    /// free only that stream is ordered after); an allocation past a member
    /// that did not come, or in its place at another size or on another
    /// stream, ends the filling.
    pub fn place(&self, number: u32, size: u64, stream: usize) -> Option<usize> {
        let mut inner = lock(&self.inner);
        let base = inner.filling.as_ref()?.base;
        let same_stream = stream != 0 && inner.live.get(&base).is_some_and(|l| l.stream == stream);
        let filling = inner.filling.as_mut()?;
        while filling
            .rest
            .front()
            .is_some_and(|slot| slot.number < number)
        {
            filling.rest.pop_front();
        }
        let slot = match filling.rest.front() {
            Some(slot) if slot.number == number && slot.size == size && same_stream => *slot,
            Some(slot) if slot.number == number => {
                // Not the size or stream the step before had here: the
                // steps differ, and the group takes no more.
                inner.filling = None;
                return None;
            }
            Some(_) => return None,
            None => {
                inner.filling = None;
                return None;
            }
        };
        filling.rest.pop_front();
        let base = filling.base;
        let start = base + slot.offset as usize;
        if filling.rest.is_empty() {
            inner.filling = None;
        }
        inner.live.get_mut(&base)?.members += 1;
        inner.member_of.insert(start, base);
        Some(start)
    }

    /// [`Inner::holds`].
    #[cfg(test)]
    pub fn holds(&self, start: usize) -> bool {
        lock(&self.inner).holds(start)
    }

    /// The member at `start` is freed (`event`: recorded at its free, if
    /// one was; `held`: while a stream was captured); `None` if it is no
    /// member.
    pub fn free_member(
        &self,
        start: usize,
        event: Option<MemberFree>,
        held: bool,
    ) -> Option<Freed> {
        let mut inner = lock(&self.inner);
        let Some(base) = inner.member_of.remove(&start) else {
            return inner.live.contains_key(&start).then_some(Freed::Again);
        };
        let live = inner.live.get_mut(&base)?;
        live.frees.extend(event);
        live.held |= held;
        live.members = live.members.saturating_sub(1);
        if live.members > 0 {
            return Some(Freed::Kept);
        }
        let live = inner.live.remove(&base)?;
        if inner.filling.as_ref().is_some_and(|f| f.base == base) {
            inner.filling = None;
        }
        Some(Freed::Last {
            base,
            frees: live.frees,
            held: live.held,
        })
    }

    /// The step ended: its record gives the next step's plan by `rules`,
    /// its groups held to the most its allocations last said.
    pub fn step(&self, rules: &Rules) {
        let mut inner = lock(&self.inner);
        let rules = Rules {
            cap: rules.cap.min(inner.most),
            ..*rules
        };
        let rules = &rules;
        let made = std::mem::take(&mut inner.made);
        inner.index_of.clear();
        inner.clock = 0;
        inner.filling = None;
        inner.plan = if made.len() < MAX_MADE {
            plan(&made, rules)
        } else {
            HashMap::default()
        };
    }
}

/// The groups of a step's allocations `made`, by the number of each one's
/// first member.
fn plan(made: &[Made], rules: &Rules) -> HashMap<u32, Planned> {
    groups(made, rules)
        .into_iter()
        .map(|group| {
            let first = group.members[0];
            let mut offset = rules.pages(made[first].size);
            let rest = group.members[1..]
                .iter()
                .map(|&member| {
                    let size = made[member].size;
                    let slot = Slot {
                        number: member as u32,
                        size,
                        offset,
                    };
                    offset += rules.pages(size);
                    slot
                })
                .collect();
            let planned = Planned {
                bytes: group.bytes,
                first_size: made[first].size,
                rest,
            };
            (first as u32, planned)
        })
        .collect()
}

#[cfg(test)]
mod tests;
