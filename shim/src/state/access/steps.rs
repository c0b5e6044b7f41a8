//! Where a launch falls in the job's step: training and serving loops repeat
//! one sequence of launches per step, so a function launched exactly once
//! per step recurs at a constant distance (in launches) from itself. The
//! function with the longest such distance, stable over three recurrences,
//! marks where each step begins. A job may instead mark its steps itself
//! (`vramshare_step()`), and then no guessing is done.
//!
//! Everything here is a handful of relaxed atomics per launch: a step
//! boundary guessed a launch late by a racing thread costs precision in the
//! profile, never correctness.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Recurrences at one distance before a function can mark steps.
const STABLE: u64 = 2;

/// The shortest step, in launches: a function launched over and over on its
/// own (a benchmark's loop) recurs at every launch, and is not a step. An
/// executable graph is a step's worth of work by itself: a loop that only
/// replays one graph has a step of one launch ([`Steps::launch`]'s
/// `shortest`).
pub const SHORTEST: u64 = 4;

/// Launch numbers a thread claims at once: one shared increment per this
/// many launches, so that threads launching at once do not contend on it.
/// A single launching thread (the usual case) still numbers its launches
/// one after another. These numbers place launches in a step.
const CLAIMED: u64 = 64;

thread_local! {
    /// This thread's claimed launch numbers (steps id, next, end), and its
    /// own launches so far: recurrences are measured in those, so that
    /// another thread's launches in between (PyTorch's autograd thread
    /// runs the backward pass) do not blur them.
    static CLAIM: std::cell::Cell<(usize, u64, u64, u64)> = const { std::cell::Cell::new((0, 0, 0, 0)) };
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// How a function recurs, as one thread saw it: the launch number of its
/// latest launch (plus one; 0: none yet), the distance to the one before,
/// and how many times in a row that distance repeated. Kept by each thread
/// for the functions it launches ([`super::functions`]), so that threads
/// launching one function at once never write a shared line for it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recurrence {
    last: u64,
    period: u64,
    repeats: u64,
}

impl Recurrence {
    pub const ZERO: Recurrence = Recurrence {
        last: 0,
        period: 0,
        repeats: 0,
    };

    /// Whether no launch was noted yet.
    #[cfg(test)]
    pub fn is_fresh(&self) -> bool {
        self.last == 0
    }

    /// Notes a launch numbered `seq`; the function's period if it is stable.
    fn note(&mut self, seq: u64) -> Option<u64> {
        let last = std::mem::replace(&mut self.last, seq + 1);
        if last == 0 {
            return None;
        }
        let gap = (seq + 1).saturating_sub(last);
        if self.period != gap {
            self.period = gap;
            self.repeats = 0;
            return None;
        }
        self.repeats = (self.repeats + 1).min(STABLE);
        (self.repeats >= STABLE).then_some(gap)
    }
}

/// Its own cache line, apart from what every launch reads.
#[repr(align(64))]
struct Counter(AtomicU64);

pub struct Steps {
    id: usize,
    /// Launch numbers claimed so far.
    seq: Counter,
    /// Steps begun (0 until the first boundary is known).
    step: AtomicU64,
    /// The launch number at which the current step began.
    start: AtomicU64,
    /// The function that marks steps (its key), the thread whose launches
    /// of it do, and its period in that thread's launches.
    anchor: AtomicUsize,
    anchor_thread: AtomicUsize,
    period: AtomicU64,
    /// The step begun when the anchor was chosen (or the job first marked
    /// one): the steps before are guesswork, left out of what is shown.
    found_at: AtomicU64,
    /// The anchor recurred at another distance since it was chosen: a
    /// longer stable period may then take its place, even a multiple of it.
    broken: AtomicBool,
    /// The job marks its steps itself.
    marked: AtomicBool,
    /// A copy or memset was placed (they take no launch number).
    placed: AtomicBool,
    /// Launches in the latest complete step (0: none yet).
    length: AtomicU64,
}

/// A launch's place: its step, and how many launches into the step it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub step: u64,
    pub position: u64,
}

impl Default for Steps {
    fn default() -> Self {
        Self::new()
    }
}

impl Steps {
    pub fn new() -> Self {
        Steps {
            id: NEXT_ID.fetch_add(1, Relaxed),
            seq: Counter(AtomicU64::new(0)),
            step: AtomicU64::new(0),
            start: AtomicU64::new(0),
            anchor: AtomicUsize::new(0),
            anchor_thread: AtomicUsize::new(0),
            period: AtomicU64::new(0),
            found_at: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            marked: AtomicBool::new(false),
            placed: AtomicBool::new(false),
            length: AtomicU64::new(0),
        }
    }

    /// A launch of the function `key` (whose recurrence is `recurrence`;
    /// `None` for a call that is not a kernel's launch): its place. It may
    /// mark steps if it recurs at least every `shortest` launches.
    pub fn launch(&self, key: usize, recurrence: Option<&mut Recurrence>, shortest: u64) -> Place {
        let (seq, own, thread) = self.number();
        if let Some(recurrence) = recurrence {
            let stable = recurrence.note(own);
            if !self.marked.load(Relaxed) {
                self.guess(
                    (key, thread),
                    seq,
                    stable.filter(|period| *period >= shortest),
                );
            }
        }
        let start = self.start.load(Relaxed);
        Place {
            step: self.step.load(Relaxed),
            position: seq.saturating_sub(start),
        }
    }

    /// The place of a call that is not a launch (a copy, a memset): where
    /// the thread's next launch will be, without taking its number, so that
    /// copies made on some steps only (a loss read every tenth step) do not
    /// change how launches recur.
    pub fn place_now(&self) -> Place {
        if !self.placed.load(Relaxed) {
            self.placed.store(true, Relaxed);
        }
        let next = CLAIM
            .try_with(|claim| {
                let (id, next, end, _) = claim.get();
                (id == self.id && next < end).then_some(next)
            })
            .ok()
            .flatten()
            .unwrap_or_else(|| self.seq.0.load(Relaxed));
        Place {
            step: self.step.load(Relaxed),
            position: next.saturating_sub(self.start.load(Relaxed)),
        }
    }

    /// The next launch number of this thread's claim (claiming more when it
    /// is used up), the thread's own count of its launches, and a token of
    /// the thread (its claim's address, unique among live threads).
    fn number(&self) -> (u64, u64, usize) {
        let claimed = CLAIM.try_with(|claim| {
            let thread = claim as *const _ as usize;
            let (id, next, end, own) = claim.get();
            let own = if id == self.id { own } else { 0 };
            if id == self.id && next < end {
                claim.set((id, next + 1, end, own + 1));
                return (next, own, thread);
            }
            let start = self.seq.0.fetch_add(CLAIMED, Relaxed);
            claim.set((self.id, start + 1, start + CLAIMED, own + 1));
            (start, own, thread)
        });
        claimed.unwrap_or_else(|_| (self.seq.0.fetch_add(1, Relaxed), 0, 0))
    }

    /// A launch of `key` on `thread`: a step begins at the anchor's
    /// launches on the anchor's thread (the same kernel launched by another
    /// thread, in the backward pass say, marks nothing).
    fn guess(&self, (key, thread): (usize, usize), seq: u64, stable: Option<u64>) {
        let anchor = self.anchor.load(Relaxed);
        let period = self.period.load(Relaxed);
        if key == anchor && thread == self.anchor_thread.load(Relaxed) {
            if stable != Some(period) {
                self.broken.store(true, Relaxed);
            }
            self.begin(seq);
            return;
        }
        let Some(candidate) = stable else {
            return;
        };
        let longer = candidate > period;
        // A function recurring every few steps (a checkpoint, an
        // evaluation) has a multiple of the step's period: it takes over
        // only from an anchor that has shown itself irregular.
        let multiple = period > 0 && candidate % period == 0;
        if longer && (!multiple || self.broken.load(Relaxed)) {
            self.anchor.store(key, Relaxed);
            self.anchor_thread.store(thread, Relaxed);
            self.period.store(candidate, Relaxed);
            self.broken.store(false, Relaxed);
            let found = self.begin(seq);
            self.found_at.store(found, Relaxed);
        }
    }

    /// Begins a step at launch `seq`; its number.
    fn begin(&self, seq: u64) -> u64 {
        let before = self.start.swap(seq, Relaxed);
        if before > 0 {
            self.length.store(seq.saturating_sub(before), Relaxed);
        }
        self.step.fetch_add(1, Relaxed) + 1
    }

    /// The job says a step begins now; from then on only its marks count.
    pub fn mark(&self) {
        let first = !self.marked.swap(true, Relaxed);
        let step = self.begin(self.number().0);
        if first {
            self.found_at.store(step, Relaxed);
        }
    }

    /// The number of the step under way (0 before any was found).
    /// Launches in the latest complete step (0: none yet).
    pub fn length(&self) -> u64 {
        self.length.load(Relaxed)
    }

    pub fn current(&self) -> u64 {
        self.step.load(Relaxed)
    }

    /// The number of the first step under the anchor (or the job's marks)
    /// in force: earlier ones were guesses, since replaced.
    pub fn found_at(&self) -> u64 {
        self.found_at.load(Relaxed)
    }

    /// Steps begun since the step was found (0 if it never was).
    pub fn steps(&self) -> u64 {
        let found = self.found_at();
        if found == 0 {
            0
        } else {
            self.current() + 1 - found
        }
    }

    /// The steps' period in launches, when found by recurrence (0 when the
    /// job marks its steps or none was found).
    pub fn period(&self) -> u64 {
        if self.marked.load(Relaxed) {
            0
        } else {
            self.period.load(Relaxed)
        }
    }

    pub fn marked(&self) -> bool {
        self.marked.load(Relaxed)
    }

    /// Whether any launch, copy or memset was placed.
    pub fn any(&self) -> bool {
        self.seq.0.load(Relaxed) > 0 || self.placed.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Runs `sequence` (function keys) `times` times; the steps counted.
    fn run(steps: &Steps, sequence: &[usize], times: usize, seen: &mut HashMap<usize, Recurrence>) {
        for _ in 0..times {
            for key in sequence {
                steps.launch(*key, Some(seen.entry(*key).or_default()), SHORTEST);
            }
        }
    }

    #[test]
    fn a_repeating_sequence_is_found_to_be_the_step() {
        // A layer repeated four times inside the step: its kernels recur at
        // the layer's distance too, but the step's once-per-step kernels
        // recur at a longer one.
        let layer = [10, 11, 12];
        let mut step = vec![1, 2];
        for _ in 0..4 {
            step.extend(layer);
        }
        step.extend([3, 4, 5]);
        let steps = Steps::new();
        let mut seen = HashMap::new();
        run(&steps, &step, 10, &mut seen);
        assert_eq!(steps.period(), step.len() as u64);
        let before = steps.steps();
        // Found at the fourth step (the third equal distance), the layer's
        // earlier guesses dropped: one step per step after.
        assert_eq!(before, 7);
        run(&steps, &step, 5, &mut seen);
        assert_eq!(steps.steps(), before + 5);
        let place = steps.launch(1, seen.get_mut(&1), SHORTEST);
        assert_eq!(place.position, 0, "the step begins at its first launch");
        // One function launched over and over is no step.
        let alone = Steps::new();
        run(&alone, &[7], 100, &mut HashMap::new());
        assert_eq!((alone.steps(), alone.period()), (0, 0));
        // A graph replayed over and over is: each replay is a step, from
        // the fourth on (the third equal distance).
        let replays = Steps::new();
        let mut seen = HashMap::new();
        for _ in 0..10 {
            replays.launch(7, Some(seen.entry(7).or_default()), 1);
        }
        assert_eq!((replays.steps(), replays.period()), (7, 1));
        let place = steps.launch(2, seen.get_mut(&2), SHORTEST);
        assert_eq!(place.position, 1);
    }

    #[test]
    fn copies_made_on_some_steps_only_leave_the_step_as_it_is() {
        let steps = Steps::new();
        let mut seen = HashMap::new();
        for round in 0..20 {
            run(&steps, &[1, 2, 3, 4, 5], 1, &mut seen);
            if round % 3 == 0 {
                let place = steps.place_now();
                assert_eq!(place.step, steps.current());
            }
        }
        assert_eq!(steps.period(), 5);
        assert_eq!(
            steps.steps(),
            17,
            "found at the fourth step, one a step since"
        );
    }

    #[test]
    fn a_function_every_few_steps_does_not_stretch_the_step() {
        let step = [1, 2, 3, 4];
        let steps = Steps::new();
        let mut seen = HashMap::new();
        run(&steps, &step, 4, &mut seen);
        for _ in 0..10 {
            run(&steps, &step, 3, &mut seen);
            run(&steps, &[99], 1, &mut seen);
        }
        // 99 recurs every 13 launches, not a multiple of 4: the step is now
        // the three-step cycle, as a repeating sequence says it is.
        assert_eq!(steps.period(), 13);

        let steps = Steps::new();
        let mut seen = HashMap::new();
        let with_checkpoint = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8];
        run(&steps, &with_checkpoint[..4], 4, &mut seen);
        run(&steps, &with_checkpoint, 10, &mut seen);
        // 5..8 recur every 16 launches, not a multiple of 4 since 1 sees
        // 4, 4, 8 gaps: irregular, so the longer cycle wins.
        assert_eq!(steps.period(), 16);
    }

    #[test]
    fn a_regular_anchor_keeps_its_step_against_a_multiple() {
        let steps = Steps::new();
        let mut seen = HashMap::new();
        run(&steps, &[1, 2, 3, 4], 5, &mut seen);
        assert_eq!(steps.period(), 4);
        // Another function launched on its own every third step would
        // have to be launched *instead of* nothing: model it as 3's twin
        // that recurs every 12 launches in place of 3.
        for _ in 0..10 {
            run(&steps, &[1, 2, 3, 4], 2, &mut seen);
            run(&steps, &[1, 2, 30, 4], 1, &mut seen);
        }
        assert_eq!(steps.period(), 4, "1 stays the anchor: 30's 12 is 3 steps");
    }

    #[test]
    fn the_same_kernel_on_another_thread_marks_no_step() {
        let steps = Steps::new();
        let mut seen = HashMap::new();
        run(&steps, &[1, 2, 3, 4], 6, &mut seen);
        let found = steps.steps();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut theirs = HashMap::new();
                run(&steps, &[1, 9], 10, &mut theirs);
            });
        });
        assert_eq!(steps.steps(), found);
    }

    #[test]
    fn marks_replace_the_guess() {
        let steps = Steps::new();
        let mut seen = HashMap::new();
        run(&steps, &[1, 2, 3, 4], 5, &mut seen);
        assert!(steps.steps() > 0);
        steps.mark();
        run(&steps, &[1, 2, 3, 4], 5, &mut seen);
        assert_eq!(
            steps.steps(),
            1,
            "only the mark began a step, the first counted"
        );
        assert_eq!(steps.period(), 0);
        steps.mark();
        assert_eq!(steps.steps(), 2);
    }
}
