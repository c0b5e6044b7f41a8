//! The step before, kept use by use. Where the job marks its steps, each
//! use that names blocks (a launch, a library call, a copy) is recorded as
//! the blocks it named, in order. The step that follows repeats it, so the
//! record of the step before says which blocks the uses about to be made
//! will name (the spill tier brings those onto the device ahead of need),
//! and how many uses away each block's next use is (the tier moves out the
//! one needed last).
//!
//! A block is known by when it was handed out, not by its start: the same
//! tensor of the next step is often at another start (blocks freed in
//! stream order come back in the order their frees complete, which timing
//! decides), while the job's allocations come in the same order each step.
//! A block handed out in the step under way is known as the so-manieth
//! allocation of its step, one from the step before as the so-manieth of
//! that step, and an older one (weights, optimizer state: they stay where
//! they are) by its start. Nothing here is trusted for correctness: a
//! prediction that is wrong moves a block early or late, and costs speed
//! only. How often the step before agreed with the step under way is
//! counted, and the record follows the step under way where a use came
//! early or late.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Mutex;

/// The most blocks a step's record holds: past that, the step is not kept
/// (a step of more uses than this is not a training loop's).
pub(super) const MAX_RECORDED: usize = 1 << 20;

/// How far, in uses, the record looks for the use under way when it does
/// not find it where the step before had it.
const RESYNC: usize = 16;

/// Tags of a block's name ([`Births::name`]): handed out in the step under
/// way, or in the step before, with its number among that step's
/// allocations in the low bits. An older block's name is its start, which
/// is below both (addresses have at most 57 bits).
const BORN_NOW: usize = 1 << 62;
const BORN_BEFORE: usize = 1 << 63;

/// When the blocks of the last two steps were handed out.
#[derive(Default)]
struct Births {
    /// Steps marked so far.
    step: u64,
    /// Each start handed out in the step under way or the one before: the
    /// step and its number among the step's allocations.
    born: HashMap<usize, (u64, u32)>,
    /// The starts of the step under way's allocations, and of the step
    /// before's, in the order handed out.
    now: Vec<usize>,
    before: Vec<usize>,
}

impl Births {
    fn handed_out(&mut self, start: usize) {
        if self.now.len() >= MAX_RECORDED {
            // Past the most kept: an allocation not counted is known by
            // its start, as an old block is.
            self.born.remove(&start);
            return;
        }
        self.born.insert(start, (self.step, self.now.len() as u32));
        self.now.push(start);
    }

    fn step(&mut self) {
        self.step += 1;
        self.before = std::mem::take(&mut self.now);
        let oldest = self.step - 1;
        self.born.retain(|_, (step, _)| *step >= oldest);
    }

    /// The name a block at `start` goes by in the step under way.
    fn name(&self, start: usize) -> usize {
        match self.born.get(&start) {
            Some(&(step, number)) if step == self.step => BORN_NOW | number as usize,
            Some(&(step, number)) if step + 1 == self.step => BORN_BEFORE | number as usize,
            _ => start,
        }
    }

    /// The start of the live block named `name`, if there is one.
    fn start(&self, name: usize) -> Option<usize> {
        let (list, step, number) = if name & BORN_BEFORE != 0 {
            (&self.before, self.step.checked_sub(1)?, name & !BORN_BEFORE)
        } else if name & BORN_NOW != 0 {
            (&self.now, self.step, name & !BORN_NOW)
        } else {
            return Some(name);
        };
        let start = *list.get(number)?;
        // Handed out again since (a later allocation at the same start):
        // not the block the name was given.
        (self.born.get(&start) == Some(&(step, number as u32))).then_some(start)
    }
}

/// One step's uses: the names of the blocks each named, use `i`'s at
/// `starts[ends[i - 1]..ends[i]]`; past [`MAX_RECORDED`] names in all, none
/// is kept.
#[derive(Default)]
pub(super) struct Recording {
    starts: Vec<usize>,
    ends: Vec<u32>,
    overflowed: bool,
}

impl Recording {
    /// Whether the use was kept (not past the bound).
    pub(super) fn push(&mut self, named: &[usize]) -> bool {
        if self.overflowed || self.starts.len() + named.len() > MAX_RECORDED {
            self.overflowed = true;
            return false;
        }
        self.starts.extend_from_slice(named);
        self.ends.push(self.starts.len() as u32);
        true
    }

    pub(super) fn uses(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds a whole step: uses, and none lost past the bound.
    pub(super) fn complete(&self) -> bool {
        !self.overflowed && self.uses() > 0
    }

    pub(super) fn named(&self, at: usize) -> &[usize] {
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
        if !recording.complete() {
            return None;
        }
        let mut positions: HashMap<usize, Vec<u32>> = HashMap::default();
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
    /// Of those missed, uses whose first block the step before never named.
    unseen: u64,
    /// The first misses of the step under way, and of the last complete
    /// one ([`Replay::last_misses`]).
    misses: Vec<Miss>,
    last_misses: Vec<Miss>,
    births: Births,
    /// The most bytes the live blocks required out of the device at once
    /// in the step under way, with the position of the use where it was
    /// first reached.
    out_needed_now: (u64, usize),
    /// The last steps' ends, oldest first, at most [`PEAKS_KEPT`]: the
    /// last is the step before, whose peak the step under way aims at.
    peaks: std::collections::VecDeque<StepPeak>,
}

/// A step that ended: its uses, and the most bytes its live blocks
/// required out of the device at once, first reached at use `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepPeak {
    pub uses: usize,
    pub bytes: u64,
    pub at: usize,
}

/// The most steps' ends kept ([`Replay::step_peaks`]).
const PEAKS_KEPT: usize = 64;

/// The most misses kept a step ([`Replay::last_misses`]).
const MISSES_KEPT: usize = 16;

/// A use that did not name first what the step before had named first at
/// the place the record had reached: the use's own place in its step, what
/// the step before named first there (`None`: past its end) and what the use
/// named first (as names: see [`describe`]), and how far from there the
/// record found the same first block (`None`: not within [`RESYNC`] uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Miss {
    pub at: usize,
    pub expected: Option<usize>,
    pub named: usize,
    pub found_at: Option<isize>,
}

/// A block's name as a reader of the trace can take it: the so-manieth
/// allocation of the step under way or of the one before, or an older
/// block's start.
pub fn describe(name: usize) -> String {
    if name & BORN_BEFORE != 0 {
        format!("allocation {} of the step before", name & !BORN_BEFORE)
    } else if name & BORN_NOW != 0 {
        format!("allocation {} of its step", name & !BORN_NOW)
    } else {
        format!("older block at {name:#x}")
    }
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

/// Where the step before's peak lies from the step under way
/// ([`Replay::out_needed_peak`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peak {
    /// The step before noted no bytes required out (or there was none).
    Unknown,
    /// Still to come: the bytes required out there, and how many uses
    /// from now.
    Ahead { bytes: u64, uses: u64 },
    /// The step under way has passed it.
    Passed,
}

impl Replay {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::state::lock(&self.inner)
    }

    /// A block was handed out at `start`, in the step under way.
    pub fn handed_out(&self, start: usize) {
        self.lock().births.handed_out(start);
    }

    /// A use that named `named` (blocks by start, none empty), in the
    /// step under way.
    pub fn record(&self, named: &[usize]) {
        if named.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let named: Vec<usize> = named.iter().map(|s| inner.births.name(*s)).collect();
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
        // Where the record found the use's first block, for a miss.
        let missed = match found {
            Some(Some(0)) => {
                inner.matched += 1;
                None
            }
            Some(Some(d)) => {
                inner.missed += 1;
                inner.shift += d;
                Some(Some(d))
            }
            Some(None) => {
                inner.missed += 1;
                let first = named[0];
                if (inner.before.as_ref()).is_some_and(|b| !b.positions.contains_key(&first)) {
                    inner.unseen += 1;
                }
                Some(None)
            }
            None => None,
        };
        if let Some(found_at) = missed.filter(|_| inner.misses.len() < MISSES_KEPT) {
            let expected = (inner.before.as_ref())
                .and_then(|before| (at < before.uses()).then(|| before.recording.named(at)[0]));
            let miss = Miss {
                at: inner.now.uses(),
                expected,
                named: named[0],
                found_at,
            };
            inner.misses.push(miss);
        }
        inner.now.push(&named);
    }

    /// The job began a step: the one that ended is the step before.
    pub fn step(&self) {
        let mut inner = self.lock();
        let ended = std::mem::take(&mut inner.now);
        let uses = ended.uses();
        let length = inner.before.as_ref().map_or(0, Recorded::uses);
        // What was looked at past the step's end is this step's start, as
        // [`Replay::upcoming`] wrapped it.
        inner.looked = inner.looked.saturating_sub(length);
        inner.shift = 0;
        inner.last_misses = std::mem::take(&mut inner.misses);
        inner.before = Recorded::of(ended);
        inner.births.step();
        let (bytes, at) = std::mem::take(&mut inner.out_needed_now);
        if inner.peaks.len() == PEAKS_KEPT {
            inner.peaks.pop_front();
        }
        inner.peaks.push_back(StepPeak { uses, bytes, at });
    }

    /// After a use: the live blocks require `bytes` out of the device.
    pub fn note_out_needed(&self, bytes: u64) {
        let mut inner = self.lock();
        if bytes > inner.out_needed_now.0 {
            inner.out_needed_now = (bytes, inner.now.uses());
        }
    }

    /// The most bytes the live blocks required out of the device at once
    /// in the step under way so far.
    pub fn out_needed_most(&self) -> u64 {
        self.lock().out_needed_now.0
    }

    /// The last steps that ended (at most 64), oldest first: what tells a
    /// step whose record sent too few blocks out early from the others.
    pub fn step_peaks(&self) -> Vec<StepPeak> {
        self.lock().peaks.iter().copied().collect()
    }

    /// Where the live blocks of the step before required the most bytes
    /// out of the device at once, against the step under way.
    pub fn out_needed_peak(&self) -> Peak {
        let inner = self.lock();
        let Some(&StepPeak {
            bytes,
            at: position,
            ..
        }) = inner.peaks.back()
        else {
            return Peak::Unknown;
        };
        let now = inner.at();
        match bytes {
            0 => Peak::Unknown,
            _ if position > now => Peak::Ahead {
                bytes,
                uses: (position - now) as u64,
            },
            _ => Peak::Passed,
        }
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
                let positions = before.positions.get(&inner.births.name(*start))?;
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
            // Past the step's end, its start again: the next step's. A
            // block not handed out yet has no start to bring.
            for name in before.recording.named(position % length) {
                if let Some(start) = inner.births.start(*name) {
                    found.push((position - now, start));
                }
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
    /// their place; uses that did not; and of those, uses whose first
    /// block the step before never named.
    pub fn agreement(&self) -> (u64, u64, u64) {
        let inner = self.lock();
        (inner.matched, inner.missed, inner.unseen)
    }

    /// The first misses ([`MISSES_KEPT`]) of the last complete step: what
    /// tells a record that fails to foretell the next step from one that
    /// follows it, late or early.
    pub fn last_misses(&self) -> Vec<Miss> {
        self.lock().last_misses.clone()
    }
}

#[cfg(test)]
mod tests;
