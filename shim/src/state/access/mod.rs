//! What the job's kernels touch. Each launch's parameters (or a library
//! call's operands) are read for pointers into live blocks; each block named
//! gets the use in its profile, placed in the job's step. The cost is
//! constant per launch: a thread-local lookup of the function, a sorted
//! snapshot of the blocks, relaxed atomics. Nothing grows with the length of
//! the run (functions, live blocks and a bounded number of freed ones).

pub mod functions;
pub mod graphs;
pub mod groups;
pub mod index;
pub mod profile;
pub mod replay;
pub mod report;
pub mod steps;
pub mod use_log;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use functions::Functions;
use index::{BlockIndex, Snapshot};
use steps::Recurrence;

use crate::state::ledger::Ledger;
use crate::state::reused::Reused;
use steps::Steps;

/// Distinct blocks one launch can name (more are rare: a launch names its
/// few operands; a kernel over a list of tensors names at most this many).
pub const MAX_NAMED: usize = 64;

#[derive(Default)]
pub struct Access {
    pub functions: Functions,
    pub index: BlockIndex,
    pub steps: Steps,
    pub graphs: graphs::Graphs,
    pub replay: replay::Replay,
    pub use_log: use_log::UseLog,
}

/// What made a use: a kernel's launch, an executable graph's (a step's worth
/// of work by itself), a library call (whose own kernels are not read), or
/// a copy or memset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    Kernel,
    Graph,
    Library,
    Copy,
}

impl Launch {
    fn via(self) -> u64 {
        match self {
            Launch::Kernel | Launch::Graph => profile::VIA_KERNEL,
            Launch::Library => profile::VIA_LIBRARY,
            Launch::Copy => profile::VIA_COPY,
        }
    }

    fn shortest_step(self) -> u64 {
        match self {
            Launch::Graph => 1,
            Launch::Kernel | Launch::Library | Launch::Copy => steps::SHORTEST,
        }
    }
}

/// The blocks a use named, by start (the first 64): what the spill tier
/// brings onto the device before the use is made, where they are in host
/// memory, and what it must not move out to make room. And, where the tier
/// asked for them ([`collect_within`]), every word of the use that falls in
/// the tier's addresses, however stale the index: what the use may touch.
pub struct Named {
    starts: [usize; 64],
    count: usize,
    words: Words,
}

impl Default for Named {
    fn default() -> Self {
        Named {
            starts: [0; 64],
            count: 0,
            words: Words::default(),
        }
    }
}

/// A use's words that fall in the tier's addresses (at most
/// [`MAX_WORDS`]), and whether there were more: the use may touch blocks
/// beyond those.
struct Words {
    kept: Reused<u64>,
    overflowed: bool,
}

thread_local! {
    /// A buffer for the next use's words, kept from the last.
    static SPARE_WORDS: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

impl Default for Words {
    fn default() -> Self {
        Words {
            kept: Reused::new(&SPARE_WORDS),
            overflowed: false,
        }
    }
}

impl Words {
    #[inline]
    fn keep(&mut self, value: u64) {
        if self.kept.len() < MAX_WORDS {
            self.kept.push(value);
        } else {
            self.overflowed = true;
        }
    }
}

impl Named {
    fn note(&mut self, start: usize) {
        if self.count < self.starts.len() {
            self.starts[self.count] = start;
            self.count += 1;
        }
    }

    pub fn blocks(&self) -> &[usize] {
        &self.starts[..self.count]
    }

    /// The words collected, and whether there were more.
    pub fn words(&self) -> (&[u64], bool) {
        (&self.words.kept, self.words.overflowed)
    }
}

/// The most words a use keeps for the tier ([`Named::words`]).
pub const MAX_WORDS: usize = 512;

/// The addresses whose words the uses keep, [low, high) (none while equal).
static COLLECT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Has every use keep its words in [`low`, `high`) ([`Named::words`]).
pub fn collect_within(low: u64, high: u64) {
    COLLECT[0].store(low, Relaxed);
    COLLECT[1].store(high, Relaxed);
}

/// The alignment of every spill tier block's start (its large page).
const TIER_ALIGN: u64 = 2 << 20;

/// The least alignment CUDA gives an allocation's start.
const CUDA_ALIGN: u64 = 256;

/// Words a launch passed that the snapshot did not find, kept to be asked
/// of the ledger itself (at most this many a launch).
const MAX_UNFOUND: usize = 8;

/// The blocks one launch names, as its parameters are read.
pub struct Naming<'a> {
    snapshot: &'a Snapshot,
    named: [u32; MAX_NAMED],
    count: usize,
    /// Whether the snapshot is older than the ledger: a block made since
    /// (a tensor of a stream-ordered allocator, made just before its first
    /// kernel) is not in it.
    stale: bool,
    /// Whether such a block of any kind is asked of the ledger, not only
    /// the tier's (which must come onto the device before the use): where
    /// the use log keeps every use for a replay of the step.
    every_kind: bool,
    unfound: [u64; MAX_UNFOUND],
    unfound_count: usize,
    /// The words kept for the tier, and the addresses they are kept from.
    words: Words,
    collect: (u64, u64),
    /// `[from, from + width)` holds every word that can name a block or be
    /// kept (the ledger's span, the snapshot's, the collected range): most
    /// words of a launch are sizes and strides, passed over at one
    /// comparison each ([`Naming::words`]).
    from: u64,
    width: u64,
}

impl<'a> Naming<'a> {
    fn new(snapshot: &'a Snapshot, ledger: &Ledger, generation: u64, every_kind: bool) -> Self {
        let collect = (COLLECT[0].load(Relaxed), COLLECT[1].load(Relaxed));
        // An empty range (low at or above high) widens nothing.
        let (ledger_low, ledger_high) = ledger.span();
        let (snapshot_low, snapshot_high) = snapshot.bounds();
        let collect_low = if collect.0 < collect.1 {
            collect.0
        } else {
            u64::MAX
        };
        let from = ledger_low.min(snapshot_low).min(collect_low);
        let to = ledger_high.max(snapshot_high).max(collect.1);
        Naming {
            snapshot,
            named: [0; MAX_NAMED],
            count: 0,
            stale: snapshot.generation() != generation,
            every_kind,
            unfound: [0; MAX_UNFOUND],
            unfound_count: 0,
            words: Words::default(),
            collect,
            from,
            width: to.saturating_sub(from),
        }
    }

    /// The tier's blocks (or blocks of every kind, [`Naming::every_kind`])
    /// among the words the stale snapshot did not find, by the ledger's own
    /// record (a start, which is what a kernel is most often given), by
    /// start: a block made since the snapshot still comes onto the device
    /// before the use.
    fn unfound_blocks<'b>(&'b self, ledger: &'b Ledger) -> impl Iterator<Item = usize> + 'b {
        self.unfound[..self.unfound_count]
            .iter()
            .map(|word| *word as usize)
            .filter(|start| {
                ledger
                    .block_at(*start)
                    .is_some_and(|block| block.tiered || self.every_kind)
            })
    }

    /// The indexes of the blocks named, in the snapshot.
    fn named(&self) -> impl Iterator<Item = usize> + '_ {
        self.named[..self.count].iter().map(|index| *index as usize)
    }

    /// A word of the launch's parameters, which may be a pointer.
    #[inline]
    pub fn word(&mut self, value: u64) {
        if value >= self.collect.0 && value < self.collect.1 {
            self.words.keep(value);
        }
        let Some(index) = self.snapshot.find(value) else {
            let align = if self.every_kind {
                CUDA_ALIGN
            } else {
                TIER_ALIGN
            };
            if self.stale
                && value != 0
                && value & (align - 1) == 0
                && self.unfound_count < MAX_UNFOUND
                && !self.unfound[..self.unfound_count].contains(&value)
            {
                self.unfound[self.unfound_count] = value;
                self.unfound_count += 1;
            }
            return;
        };
        let index = index as u32;
        if self.count < MAX_NAMED && !self.named[..self.count].contains(&index) {
            self.named[self.count] = index;
            self.count += 1;
        }
    }

    /// Every 8-byte word of `bytes` bytes at `start` (host memory the caller
    /// vouches for), read at 8-byte steps from the start.
    ///
    /// # Safety
    /// `start` must be readable for `bytes` bytes.
    #[inline]
    pub unsafe fn words(&mut self, start: *const u8, bytes: usize) {
        let (from, width) = (self.from, self.width);
        let inside = |value: u64| value.wrapping_sub(from) < width;
        // SAFETY: inside the caller's readable range; unaligned reads,
        // since an argument's host copy has no promised alignment.
        let read =
            |offset: usize| unsafe { std::ptr::read_unaligned(start.add(offset) as *const u64) };
        let mut offset = 0;
        // Eight words at a time, checked together without a branch each:
        // a struct of sizes and strides (hundreds of bytes) mostly passes
        // at one test of eight.
        while offset + 64 <= bytes {
            let chunk: [u64; 8] = std::array::from_fn(|word| read(offset + 8 * word));
            if chunk.iter().fold(false, |any, value| any | inside(*value)) {
                for value in chunk.into_iter().filter(|value| inside(*value)) {
                    self.word(value);
                }
            }
            offset += 64;
        }
        while offset + 8 <= bytes {
            let value = read(offset);
            if inside(value) {
                self.word(value);
            }
            offset += 8;
        }
    }
}

impl Access {
    /// The job says a step begins now ([`Steps::mark`]), after `events` of
    /// the trace (`None` where none is written): the step that ended is the
    /// one the next goes by ([`replay`]), and the one the trace keeps
    /// ([`use_log`]).
    pub fn mark_step(&self, events: Option<u64>) {
        self.steps.mark();
        self.replay.step();
        if let Some(events) = events {
            self.use_log.step(self.steps.current(), events);
        }
    }

    /// One launch of function `key` (`recurrence`: how it recurs on this
    /// thread; `None` for a library call) on `stream`: `read` feeds its
    /// parameters to the naming; each block named gets the use, and is
    /// noted in `named`. The number of blocks named.
    pub fn launch(
        &self,
        ledger: &Ledger,
        (key, kind): (usize, Launch),
        recurrence: Option<&mut Recurrence>,
        stream: u64,
        read: impl FnOnce(&mut Naming),
        named: &mut Named,
    ) -> usize {
        let place = if kind == Launch::Copy {
            self.steps.place_now()
        } else {
            self.steps.launch(key, recurrence, kind.shortest_step())
        };
        let via = kind.via();
        let live = || ledger.ranges();
        let generation = ledger.generation();
        self.index.with(generation, live, place.step, |snapshot| {
            let mut naming = Naming::new(snapshot, ledger, generation, self.use_log.on());
            read(&mut naming);
            for index in naming.named() {
                let spilled = snapshot.in_host(index);
                snapshot.profiles[index].touch(place, stream, via, spilled);
                named.note(snapshot.profiles[index].start);
            }
            let mut count = naming.count;
            for start in naming.unfound_blocks(ledger) {
                named.note(start);
                count += 1;
            }
            named.words = std::mem::take(&mut naming.words);
            count
        })
    }

    /// A use by `key` on `stream`, as [`Access::launch`] makes it; or, on a
    /// stream being captured into a graph, the graph's
    /// ([`Access::capture`]). The number of blocks named; each is
    /// noted in `named`.
    pub fn use_or_capture(
        &self,
        ledger: &Ledger,
        key: (usize, Launch),
        recurrence: Option<&mut Recurrence>,
        stream: usize,
        read: impl FnOnce(&mut Naming),
        named: &mut Named,
    ) -> usize {
        if self.graphs.capturing(stream) {
            self.capture(ledger, stream, read)
        } else {
            self.launch(ledger, key, recurrence, stream as u64, read, named)
        }
    }

    /// A launch on a stream being captured into a graph: it does not run
    /// now, so it is no use; the blocks it names are the graph's. Their
    /// number.
    fn capture(&self, ledger: &Ledger, stream: usize, read: impl FnOnce(&mut Naming)) -> usize {
        let named = self.blocks_named(ledger, read);
        self.graphs.record(stream, &named);
        named.len()
    }

    /// For each block (by start), how soon it is needed again, as a rank:
    /// the greater, the later. Where the job marks its steps, the uses
    /// until its next use in the step before's record ([`replay`]); for a
    /// block the record does not name, the launches until its next use, as
    /// its uses in this step and the one before predict ([`next_use`]).
    /// Where steps are only guessed from the launch sequence, a guess that
    /// is off (a step found inside the real one, or positions of two
    /// launching threads interleaved) would predict badly: the least
    /// recently used block ranks last, as the forward and backward passes
    /// of training use their activations (in the order made, then in the
    /// reverse order).
    pub fn next_uses(&self, ledger: &Ledger, starts: &[usize]) -> Vec<u64> {
        let live = || ledger.ranges();
        // The launch being made has taken its number: it is now.
        let mut place = self.steps.place_now();
        place.position = place.position.saturating_sub(1);
        let length = self.steps.length();
        let marked = self.steps.marked();
        let replayed = if marked {
            self.replay.next_uses(starts)
        } else {
            vec![None; starts.len()]
        };
        self.index
            .with(ledger.generation(), live, place.step, |snapshot| {
                starts
                    .iter()
                    .zip(replayed)
                    .map(|(start, replayed)| {
                        replayed.unwrap_or_else(|| match snapshot.find(*start as u64) {
                            Some(index) if marked => {
                                next_use(&snapshot.profiles[index], place, length)
                            }
                            Some(index) => least_recent_first(&snapshot.profiles[index]),
                            None => u64::MAX,
                        })
                    })
                    .collect()
            })
    }

    /// The blocks (by start) that `read` names, with no use made of them.
    pub fn blocks_named(&self, ledger: &Ledger, read: impl FnOnce(&mut Naming)) -> Vec<usize> {
        let live = || ledger.ranges();
        let step = self.steps.current();
        let generation = ledger.generation();
        self.index.with(generation, live, step, |snapshot| {
            let mut naming = Naming::new(snapshot, ledger, generation, self.use_log.on());
            read(&mut naming);
            let mut named: Vec<usize> = naming
                .named()
                .map(|index| snapshot.profiles[index].start)
                .collect();
            named.extend(naming.unfound_blocks(ledger));
            named
        })
    }
}

/// Launches from `place` until the block's next use, in a job whose steps
/// are `length` launches long: steps repeat, so the step before this one
/// says. A block it used later than now is used within its mean gap
/// between uses (or at its first use, if that is still ahead and this step
/// has not used it yet); one whose uses there are all behind, at its first
/// use of the next step. A block with no use in the step before is a step
/// away if this step used it, and never used (`u64::MAX`) if not.
pub fn next_use(profile: &profile::BlockProfile, place: steps::Place, length: u64) -> u64 {
    let now = place.position;
    let this = profile.in_step(place.step);
    let before = place
        .step
        .checked_sub(1)
        .and_then(|step| profile.in_step(step));
    match (before, this) {
        (Some(before), this) if before.last > now => {
            if this.is_none() && before.first > now {
                before.first - now
            } else {
                // Two threads' positions may blur first and last.
                (before.last.saturating_sub(before.first) / before.uses.max(1)).max(1)
            }
        }
        (Some(before), _) => length.saturating_sub(now) + before.first,
        (None, Some(_)) => length.max(1),
        (None, None) => u64::MAX,
    }
}

/// A rank that puts the least recently used block last (the greatest):
/// the step and position of its last use, inverted. Never used: last of all.
fn least_recent_first(profile: &profile::BlockProfile) -> u64 {
    let (step, position) = profile.last_use();
    if step == 0 {
        return u64::MAX;
    }
    // Steps in the high bits, positions (below 2^32 in any real step) low.
    u64::MAX - 1 - ((step.min(u32::MAX as u64) << 32) | position.min(u32::MAX as u64))
}

#[cfg(test)]
mod tests;
