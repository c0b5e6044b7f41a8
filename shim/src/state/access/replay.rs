//! The step before, kept use by use. Where the job marks its steps, each
//! use that names blocks (a launch, a library call, a copy) is recorded as
//! the blocks it named, in order. The step that follows repeats it, so the
//! record of the step before says which blocks the uses about to be made
//! will name (the spill tier brings those onto the device ahead of need),
//! and how many uses away each block's next use is (the tier moves out the
//! one needed last).
//!
//! A block is known by its start: the job's tensors are handed out again at
//! the starts of those freed a step before, as the tier keeps freed blocks
//! for reuse, so the same tensor of the next step is mostly at the same
//! start. Nothing here is trusted for correctness: a prediction that is
//! wrong moves a block early or late, and costs speed only. How often the
//! step before agreed with the step under way is counted, and the record
//! follows the step under way where a use came early or late.

use std::collections::HashMap;
use std::sync::Mutex;

/// The most blocks a step's record holds: past that, the step is not kept
/// (a step of more uses than this is not a training loop's).
const MAX_RECORDED: usize = 1 << 20;

/// How far, in uses, the record looks for the use under way when it does
/// not find it where the step before had it.
const RESYNC: usize = 16;

/// One step's uses: the starts each named, use `i`'s at
/// `starts[ends[i - 1]..ends[i]]`.
#[derive(Default)]
struct Recording {
    starts: Vec<usize>,
    ends: Vec<u32>,
    overflowed: bool,
}

impl Recording {
    fn push(&mut self, named: &[usize]) {
        if self.overflowed || self.starts.len() + named.len() > MAX_RECORDED {
            self.overflowed = true;
            return;
        }
        self.starts.extend_from_slice(named);
        self.ends.push(self.starts.len() as u32);
    }

    fn uses(&self) -> usize {
        self.ends.len()
    }

    fn named(&self, at: usize) -> &[usize] {
        let begin = at.checked_sub(1).map_or(0, |before| self.ends[before]) as usize;
        &self.starts[begin..self.ends[at] as usize]
    }
}

/// A complete step's record, with each start's uses (positions, in order).
struct Recorded {
    recording: Recording,
    positions: HashMap<usize, Vec<u32>>,
}

impl Recorded {
    fn of(recording: Recording) -> Option<Recorded> {
        if recording.overflowed || recording.uses() == 0 {
            return None;
        }
        let mut positions: HashMap<usize, Vec<u32>> = HashMap::new();
        for at in 0..recording.uses() {
            for start in recording.named(at) {
                let list = positions.entry(*start).or_default();
                if list.last() != Some(&(at as u32)) {
                    list.push(at as u32);
                }
            }
        }
        Some(Recorded {
            recording,
            positions,
        })
    }

    fn uses(&self) -> usize {
        self.recording.uses()
    }
}

#[derive(Default)]
struct Inner {
    now: Recording,
    before: Option<Recorded>,
    /// Where the use under way falls in the step before: its own position
    /// plus this (the record followed a use that came early or late).
    shift: isize,
    /// The furthest position of the step before (past its end: into the
    /// next step's) that the tier has looked at ahead of need.
    looked: usize,
    matched: u64,
    missed: u64,
}

impl Inner {
    /// The position of the step before that the next use matches.
    fn at(&self) -> usize {
        (self.now.uses() as isize + self.shift).max(0) as usize
    }
}

/// The step before, kept for the step under way.
#[derive(Default)]
pub struct Replay {
    inner: Mutex<Inner>,
}

impl Replay {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::state::lock(&self.inner)
    }

    /// A use that named `named` (blocks by start, none empty), in the
    /// step under way.
    pub fn record(&self, named: &[usize]) {
        if named.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let at = inner.at();
        let found = inner.before.as_ref().map(|before| {
            let uses = before.uses();
            let same = |position: usize| {
                position < uses && before.recording.named(position).first() == named.first()
            };
            if same(at) {
                Some(0)
            } else {
                // The nearest position that named the same block first.
                (1..=RESYNC as isize)
                    .flat_map(|d| [d, -d])
                    .find(|d| at.checked_add_signed(*d).is_some_and(same))
            }
        });
        match found {
            Some(Some(0)) => inner.matched += 1,
            Some(Some(d)) => {
                inner.missed += 1;
                inner.shift += d;
            }
            Some(None) => inner.missed += 1,
            None => {}
        }
        inner.now.push(named);
    }

    /// The job began a step: the one that ended is the step before.
    pub fn step(&self) {
        let mut inner = self.lock();
        let ended = std::mem::take(&mut inner.now);
        let length = inner.before.as_ref().map_or(0, Recorded::uses);
        // What was looked at past the step's end is this step's start, as
        // [`Replay::upcoming`] wrapped it.
        inner.looked = inner.looked.saturating_sub(length);
        inner.shift = 0;
        inner.before = Recorded::of(ended);
    }

    /// For each block (by start), how many uses from now the step before
    /// has its next use (around into the next step, if none is left in
    /// this one); `None` where the step before never named it.
    pub fn next_uses(&self, starts: &[usize]) -> Vec<Option<u64>> {
        let inner = self.lock();
        let Some(before) = inner.before.as_ref() else {
            return vec![None; starts.len()];
        };
        let (now, length) = (inner.at() as u64, before.uses() as u64);
        starts
            .iter()
            .map(|start| {
                let positions = before.positions.get(start)?;
                let later = positions.partition_point(|p| (*p as u64) < now);
                Some(match positions.get(later) {
                    Some(next) => *next as u64 - now,
                    None => length.saturating_sub(now) + positions[0] as u64,
                })
            })
            .collect()
    }

    /// The blocks (by start) that the next uses will name, as the step
    /// before says: from the first use not yet looked at, up to `ahead`
    /// uses from now, as (uses from now, start), at most `most` of them
    /// (whole uses: the last may pass it). The caller says how far it got
    /// ([`Replay::looked_to`]).
    pub fn upcoming(&self, ahead: usize, most: usize) -> Vec<(usize, usize)> {
        let inner = self.lock();
        let Some(before) = inner.before.as_ref() else {
            return Vec::new();
        };
        let now = inner.at();
        let length = before.uses();
        let mut found = Vec::new();
        for position in inner.looked.max(now)..now + ahead {
            if found.len() >= most {
                break;
            }
            // Past the step's end, its start again: the next step's.
            for start in before.recording.named(position % length) {
                found.push((position - now, *start));
            }
        }
        found
    }

    /// The tier has looked at the uses up to `distance` from now
    /// ([`Replay::upcoming`]), and needs not look at them again.
    pub fn looked_to(&self, distance: usize) {
        let mut inner = self.lock();
        let reached = inner.at() + distance;
        inner.looked = inner.looked.max(reached);
    }

    /// How many uses ahead of now the tier has looked: blocks used within
    /// that many were found on the device or brought there.
    pub fn looked_ahead(&self) -> u64 {
        let inner = self.lock();
        inner.looked.saturating_sub(inner.at()) as u64
    }

    /// Uses in the step before.
    pub fn length(&self) -> usize {
        self.lock().before.as_ref().map_or(0, Recorded::uses)
    }

    /// Uses that named first what the step before had them name first, at
    /// their place, and uses that did not.
    pub fn agreement(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.matched, inner.missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_of(replay: &Replay, uses: &[&[usize]]) {
        for named in uses {
            replay.record(named);
        }
        replay.step();
    }

    #[test]
    fn next_uses_count_the_uses_until_the_step_before_named_each_block() {
        let replay = Replay::default();
        step_of(&replay, &[&[1, 2], &[3], &[1], &[4]]);
        // Now at the step's first use: 1 at 0, 3 at 1 use away, 4 at 3.
        assert_eq!(
            replay.next_uses(&[1, 3, 4, 9]),
            vec![Some(0), Some(1), Some(3), None]
        );
        replay.record(&[1, 2]);
        replay.record(&[3]);
        // 1's next is position 2; 2's is in the next step (position 0).
        assert_eq!(replay.next_uses(&[1, 2]), vec![Some(0), Some(2)]);
        assert_eq!(replay.agreement(), (2, 0));
    }

    #[test]
    fn upcoming_goes_past_the_steps_end_and_never_twice_over_what_was_looked_at() {
        let replay = Replay::default();
        step_of(&replay, &[&[1], &[2], &[3]]);
        replay.record(&[1]);
        assert_eq!(replay.upcoming(3, 10), vec![(0, 2), (1, 3), (2, 1)]);
        assert_eq!(replay.upcoming(3, 1), vec![(0, 2)]);
        replay.looked_to(2);
        assert_eq!(replay.looked_ahead(), 2);
        assert_eq!(replay.upcoming(3, 10), vec![(2, 1)]);
        // The next step begins where the look had reached past the end.
        replay.record(&[2]);
        replay.record(&[3]);
        replay.looked_to(2);
        replay.step();
        assert_eq!(replay.looked_ahead(), 2);
        assert_eq!(replay.upcoming(3, 10), vec![(2, 3)]);
    }

    #[test]
    fn the_record_follows_a_step_whose_uses_came_early() {
        let replay = Replay::default();
        step_of(&replay, &[&[7], &[1], &[2], &[3]]);
        // This step left out the first use: found one position on.
        replay.record(&[1]);
        assert_eq!(replay.agreement(), (0, 1));
        replay.record(&[2]);
        assert_eq!(replay.agreement(), (1, 1));
        assert_eq!(replay.next_uses(&[3]), vec![Some(0)]);
    }

    #[test]
    fn a_step_past_the_most_blocks_kept_is_not_gone_by() {
        let replay = Replay::default();
        let many = vec![5usize; MAX_RECORDED / 2 + 1];
        step_of(&replay, &[&many, &many]);
        assert_eq!(replay.length(), 0);
        step_of(&replay, &[&[5]]);
        assert_eq!(replay.length(), 1);
    }
}
