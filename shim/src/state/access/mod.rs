//! What the job's kernels touch. Each launch's parameters (or a library
//! call's operands) are read for pointers into live blocks; each block named
//! gets the use in its profile, placed in the job's step. The cost is
//! constant per launch: a thread-local lookup of the function, a sorted
//! snapshot of the blocks, relaxed atomics. Nothing grows with the length of
//! the run (functions, live blocks and a bounded number of freed ones).

pub mod functions;
pub mod graphs;
pub mod index;
pub mod profile;
pub mod report;
pub mod steps;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use functions::Functions;
use index::{BlockIndex, Snapshot};
use steps::Recurrence;

use crate::state::ledger::Ledger;
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
    words: Vec<u64>,
    /// More such words than [`MAX_WORDS`]: the use may touch blocks beyond
    /// those.
    overflowed: bool,
}

impl Default for Named {
    fn default() -> Self {
        Named {
            starts: [0; 64],
            count: 0,
            words: Vec::new(),
            overflowed: false,
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
        (&self.words, self.overflowed)
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
    unfound: [u64; MAX_UNFOUND],
    unfound_count: usize,
    /// The words kept for the tier, and the addresses they are kept from.
    words: Vec<u64>,
    overflowed: bool,
    collect: (u64, u64),
}

impl<'a> Naming<'a> {
    fn new(snapshot: &'a Snapshot, generation: u64) -> Self {
        Naming {
            snapshot,
            named: [0; MAX_NAMED],
            count: 0,
            stale: snapshot.generation() != generation,
            unfound: [0; MAX_UNFOUND],
            unfound_count: 0,
            words: Vec::new(),
            overflowed: false,
            collect: (COLLECT[0].load(Relaxed), COLLECT[1].load(Relaxed)),
        }
    }

    /// The tier's blocks among the words the stale snapshot did not find,
    /// by the ledger's own record (a start, which is what a kernel is most
    /// often given), by start: a block made since the snapshot still comes
    /// onto the device before the use.
    fn unfound_blocks<'b>(&'b self, ledger: &'b Ledger) -> impl Iterator<Item = usize> + 'b {
        self.unfound[..self.unfound_count]
            .iter()
            .map(|word| *word as usize)
            .filter(|start| ledger.block_at(*start).is_some_and(|block| block.tiered))
    }

    /// The indexes of the blocks named, in the snapshot.
    fn named(&self) -> impl Iterator<Item = usize> + '_ {
        self.named[..self.count].iter().map(|index| *index as usize)
    }

    /// A word of the launch's parameters, which may be a pointer.
    #[inline]
    pub fn word(&mut self, value: u64) {
        if value >= self.collect.0 && value < self.collect.1 {
            if self.words.len() < MAX_WORDS {
                self.words.push(value);
            } else {
                self.overflowed = true;
            }
        }
        let Some(index) = self.snapshot.find(value) else {
            if self.stale
                && value != 0
                && value.is_multiple_of(TIER_ALIGN)
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
        let mut offset = 0;
        while offset + 8 <= bytes {
            // SAFETY: inside the caller's readable range; unaligned read,
            // since an argument's host copy has no promised alignment.
            let value = unsafe { std::ptr::read_unaligned(start.add(offset) as *const u64) };
            self.word(value);
            offset += 8;
        }
    }
}

impl Access {
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
            let mut naming = Naming::new(snapshot, generation);
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
            named.overflowed = naming.overflowed;
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
    /// the greater, the later. Where the job marks its steps, the launches
    /// until its next use, as its uses in this step and the one before
    /// predict ([`next_use`]). Where steps are only guessed from the launch
    /// sequence, a guess that is off (a step found inside the real one, or
    /// positions of two launching threads interleaved) would predict badly:
    /// the least recently used block ranks last, as the forward and
    /// backward passes of training use their activations (in the order
    /// made, then in the reverse order).
    pub fn next_uses(&self, ledger: &Ledger, starts: &[usize]) -> Vec<u64> {
        let live = || ledger.ranges();
        // The launch being made has taken its number: it is now.
        let mut place = self.steps.place_now();
        place.position = place.position.saturating_sub(1);
        let length = self.steps.length();
        let marked = self.steps.marked();
        self.index
            .with(ledger.generation(), live, place.step, |snapshot| {
                starts
                    .iter()
                    .map(|start| match snapshot.find(*start as u64) {
                        Some(index) if marked => next_use(&snapshot.profiles[index], place, length),
                        Some(index) => least_recent_first(&snapshot.profiles[index]),
                        None => u64::MAX,
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
            let mut naming = Naming::new(snapshot, generation);
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
mod tests {
    use super::*;
    use crate::state::ledger::Block;
    use vramshare_common::event::{Api, Placement};

    fn ledger_with(blocks: &[(usize, u64)]) -> Ledger {
        let ledger = Ledger::new(
            Vec::leak(vramshare_common::registry::local_counters()),
            None,
            false,
        );
        for (ptr, size) in blocks {
            let block = Block {
                size: *size,
                device: crate::config::Device::new(0).unwrap(),
                placement: Placement::Device,
                device_part: 0,
                api: Api::cudaMalloc,
                pool: 0,
                managed: false,
                moving: false,
                tiered: false,
            };
            ledger.insert(*ptr, block);
        }
        ledger
    }

    #[test]
    fn a_stale_snapshot_leaves_the_ledger_to_find_a_tier_block_made_since() {
        let ledger = ledger_with(&[]);
        let block = Block {
            size: 4 << 20,
            device: crate::config::Device::new(0).unwrap(),
            placement: Placement::Host,
            device_part: 0,
            api: Api::cudaMallocAsync,
            pool: 0,
            managed: false,
            moving: false,
            tiered: true,
        };
        let start = 0x7f00_0000_0000usize;
        ledger.insert(start, block);
        ledger.insert(
            start + (16 << 20),
            Block {
                tiered: false,
                ..block
            },
        );
        let (older, _) = index::rebuild(&Snapshot::empty(), 1, Vec::new(), 0);
        let mut naming = Naming::new(&older, 2);
        for word in [start as u64 + 8, start as u64, start as u64 + (16 << 20), 7] {
            naming.word(word);
        }
        // The start of a tier block, only: not a pointer into it, not
        // another kind of block, not a word that is no address.
        assert_eq!(naming.unfound_blocks(&ledger).collect::<Vec<_>>(), [start]);
        // A snapshot as new as the ledger is not second-guessed.
        let mut current = Naming::new(&older, 1);
        current.word(start as u64);
        assert_eq!(current.unfound_blocks(&ledger).count(), 0);
    }

    #[test]
    fn a_launch_names_each_block_once_and_places_its_use() {
        let access = Access::default();
        let ledger = ledger_with(&[(0x10000, 0x1000), (0x20000, 0x1000)]);
        let mut recurrence = Recurrence::ZERO;
        let params: [u64; 5] = [7, 0x10008, 0x10010, 0x20fff, 0x30000];
        let kernel = (0x99, Launch::Kernel);
        let named = access.launch(
            &ledger,
            kernel,
            Some(&mut recurrence),
            5,
            |n| {
                // SAFETY: the array is 40 readable bytes.
                unsafe { n.words(params.as_ptr().cast(), 40) }
            },
            &mut Named::default(),
        );
        assert_eq!(named, 2, "two pointers into the first block count once");
        let profiles = access.index.profiles();
        assert!(profiles.iter().all(|p| p.uses() == 1 && p.stream() == 5));
        // A pointer at an offset that is not a multiple of 8 from its
        // parameter's start is not read (CUDA aligns pointers to 8).
        let bytes: [u8; 12] = {
            let mut b = [0u8; 12];
            b[4..12].copy_from_slice(&0x10000u64.to_le_bytes());
            b
        };
        let named = access.launch(
            &ledger,
            kernel,
            Some(&mut recurrence),
            5,
            |n| {
                // SAFETY: 12 readable bytes.
                unsafe { n.words(bytes.as_ptr(), 12) }
            },
            &mut Named::default(),
        );
        assert_eq!(named, 0);
        // A block freed is no longer named, once the index is rebuilt: 100
        // µs after the last rebuild, or ten times that rebuild's cost if
        // longer (on a loaded machine, a rebuild can take tens of µs).
        let _ = ledger.take(0x20000);
        std::thread::sleep(std::time::Duration::from_millis(10));
        let named = access.launch(
            &ledger,
            kernel,
            None,
            5,
            |n| n.word(0x20008),
            &mut Named::default(),
        );
        assert_eq!(named, 0);
    }

    #[test]
    fn the_step_before_predicts_the_next_use_and_the_least_recent_ranks_last() {
        use profile::BlockProfile;
        use steps::Place;
        let at = |step, position| Place { step, position };
        let touch = |profile: &BlockProfile, step, positions: &[u64]| {
            for p in positions {
                profile.touch(at(step, *p), 0, profile::VIA_KERNEL, false);
            }
        };
        // Used at 10 and 90 in step 1, not yet in step 2.
        let late = BlockProfile::new(0x1000, 4096, 0, 0);
        touch(&late, 1, &[10, 90]);
        // Used at 20, 30, 40 in step 1, and at 20 in step 2.
        let busy = BlockProfile::new(0x2000, 4096, 0, 0);
        touch(&busy, 1, &[20, 30, 40]);
        touch(&busy, 2, &[20]);
        // Step 2, now at 25, steps of 100 launches.
        assert_eq!(
            next_use(&late, at(2, 25), 100),
            40,
            "its mean gap: (90 - 10) / 2"
        );
        assert_eq!(
            next_use(&late, at(2, 5), 100),
            5,
            "its first use, still ahead"
        );
        assert_eq!(
            next_use(&busy, at(2, 25), 100),
            6,
            "in its busy span: (40 - 20) / 3"
        );
        assert_eq!(
            next_use(&busy, at(2, 50), 100),
            70,
            "all its uses behind: its first of the next step"
        );
        let never = BlockProfile::new(0x3000, 4096, 0, 0);
        assert_eq!(next_use(&never, at(2, 25), 100), u64::MAX);
        // Without marked steps: the least recently used ranks greatest.
        assert!(least_recent_first(&late) > least_recent_first(&busy));
        assert_eq!(least_recent_first(&never), u64::MAX);
    }
}
