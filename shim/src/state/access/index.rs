//! The live blocks by address, for finding which block a pointer falls in
//! (a tensor is a sub-range of its caching allocator's segment, and maps to
//! that segment). A launch reads a sorted snapshot; allocating and freeing
//! only bump the ledger's generation, and the next launch that sees a new
//! generation rebuilds the snapshot once for every thread. A thread keeps
//! its own reference to the snapshot, so steady launching touches no shared
//! cache line.
//!
//! Each block's [`BlockProfile`] survives rebuilds while its block lives;
//! a freed block's profile is kept among the retired (a bounded number of
//! the most used) for the report at exit.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::profile::BlockProfile;
use crate::state::lock;

/// A live range: start, size, device, and whether it is in host memory (a
/// spilled block).
pub type Range = (usize, u64, u32, bool);

pub struct Snapshot {
    generation: u64,
    /// Lowest start and highest end of all blocks: most words of a
    /// parameter list are not pointers, and fall outside at once.
    low: u64,
    high: u64,
    /// Each block's start and end, side by side: a lookup reads one line.
    spans: Vec<[u64; 2]>,
    /// Whether each block was in host memory when the snapshot was made.
    in_host: Vec<bool>,
    /// A directory over [low, high) in buckets of 2^shift bytes: for each
    /// bucket's first byte, the last block starting at or before it. A
    /// lookup searches only between two neighbouring entries, one or two
    /// blocks where blocks spread evenly, instead of all of them.
    shift: u32,
    directory: Vec<u32>,
    pub profiles: Vec<Arc<BlockProfile>>,
}

impl Snapshot {
    pub(super) fn empty() -> Self {
        Snapshot {
            generation: u64::MAX,
            low: u64::MAX,
            high: 0,
            spans: Vec::new(),
            in_host: Vec::new(),
            shift: 0,
            directory: Vec::new(),
            profiles: Vec::new(),
        }
    }

    /// Builds the directory, about two buckets per block.
    fn direct(&mut self) {
        if self.spans.is_empty() {
            return;
        }
        let span = self.high - self.low;
        let wanted = (self.spans.len() as u64 * 2).next_power_of_two();
        self.shift = 64 - (span / wanted).leading_zeros();
        let buckets = (span >> self.shift) + 1;
        self.directory = (0..=buckets)
            .map(|bucket| {
                let boundary = self.low.saturating_add(bucket << self.shift);
                let after = self.spans.partition_point(|[start, _]| *start <= boundary);
                after.saturating_sub(1) as u32
            })
            .collect();
    }

    /// `[low, high)` holding every block (low above high while none).
    pub fn bounds(&self) -> (u64, u64) {
        (self.low, self.high)
    }

    /// The ledger's generation it was built from.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the block at `index` was in host memory.
    pub fn in_host(&self, index: usize) -> bool {
        self.in_host.get(index).copied().unwrap_or(false)
    }

    /// The index of the block holding address `value`.
    #[inline]
    pub fn find(&self, value: u64) -> Option<usize> {
        if value < self.low || value >= self.high {
            return None;
        }
        let bucket = ((value - self.low) >> self.shift) as usize;
        let from = self.directory[bucket] as usize;
        let to = self.directory[bucket + 1] as usize;
        // The block holding `value` starts at or before it: at `from` or
        // after, up to `to` (the last starting before the next bucket).
        let after = self.spans[from..=to].partition_point(|[start, _]| *start <= value);
        let index = (from + after).checked_sub(1)?;
        (value < self.spans[index][1]).then_some(index)
    }
}

/// Retired profiles kept at most (the most used, by bytes times uses).
const RETIRED: usize = 1024;

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static MINE: RefCell<Option<(usize, Arc<Snapshot>)>> = const { RefCell::new(None) };
}

pub struct BlockIndex {
    id: usize,
    current: Mutex<Arc<Snapshot>>,
    retired: Mutex<Vec<Arc<BlockProfile>>>,
    /// Profiles retired beyond the bound, not kept.
    pub forgotten: AtomicU64,
    /// The latest build: its generation, when it ended and what it took
    /// (ns). A job that allocates between most launches (one block per
    /// tensor, as stream-ordered allocators do) would otherwise rebuild at
    /// nearly every launch: a rebuild waits until [`REBUILD_SPACING`] times
    /// its own cost has passed since the last (at least
    /// [`REBUILD_EVERY`]), and launches meanwhile read the latest
    /// snapshot. Blocks a stale snapshot misses cost attribution, never
    /// correctness: a launch asks the ledger for the words the snapshot
    /// did not find, and a move asks it where a block lives.
    built: AtomicU64,
    built_at: AtomicU64,
    build_cost: AtomicU64,
    /// Rebuilds made, and the time they took.
    pub rebuilds: AtomicU64,
    pub rebuild_ns: AtomicU64,
}

/// The least time between rebuilds, in ns.
const REBUILD_EVERY: u64 = 100_000;

/// A rebuild waits this many times its own cost after the last: at most
/// about 1% of a launching thread's time goes to rebuilds. A job that
/// allocates a tensor at a time (PyTorch's `cudaMallocAsync` backend)
/// changes the ledger thousands of times a step, so that rebuilds run as
/// often as this lets them; at ten times, they took about a tenth of the
/// thread's time.
const REBUILD_SPACING: u64 = 100;

fn now_ns() -> u64 {
    vramshare_common::process::monotonic_ns()
}

impl Default for BlockIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockIndex {
    pub fn new() -> Self {
        BlockIndex {
            id: NEXT_ID.fetch_add(1, Relaxed),
            current: Mutex::new(Arc::new(Snapshot::empty())),
            retired: Mutex::new(Vec::new()),
            forgotten: AtomicU64::new(0),
            built: AtomicU64::new(u64::MAX),
            built_at: AtomicU64::new(0),
            build_cost: AtomicU64::new(0),
            rebuilds: AtomicU64::new(0),
            rebuild_ns: AtomicU64::new(0),
        }
    }

    /// Whether a rebuild may be made now.
    fn rebuild_due(&self) -> bool {
        let wait = (self.build_cost.load(Relaxed) * REBUILD_SPACING).max(REBUILD_EVERY);
        now_ns() >= self.built_at.load(Relaxed).saturating_add(wait)
    }

    /// Calls `f` with the snapshot of `generation`, built from `live` (the
    /// ledger's blocks; `step`, the steps begun, for new blocks) if no
    /// thread has built it yet.
    pub fn with<R>(
        &self,
        generation: u64,
        live: impl FnOnce() -> Vec<Range>,
        step: u64,
        f: impl FnOnce(&Snapshot) -> R,
    ) -> R {
        let mut live = Some(live);
        let mut fresh = |mine: &mut Option<(usize, Arc<Snapshot>)>| {
            let current = self.current(generation, live.take().expect("built once"), step);
            *mine = Some((self.id, current));
        };
        let mut f = Some(f);
        let outcome = MINE.try_with(|mine| {
            let mut mine = mine.borrow_mut();
            let stale = match &*mine {
                Some((id, snapshot)) => {
                    *id != self.id
                        || (snapshot.generation != generation
                            // The latest build, and no rebuild due yet: read it.
                            && (snapshot.generation != self.built.load(Relaxed)
                                || self.rebuild_due()))
                }
                None => true,
            };
            if stale {
                fresh(&mut mine);
            }
            let (_, snapshot) = mine.as_ref().expect("just set");
            (f.take().expect("called once"))(snapshot)
        });
        match outcome {
            Ok(result) => result,
            // The thread is exiting and its own reference is gone.
            Err(_) => {
                let current = match live.take() {
                    Some(live) => self.current(generation, live, step),
                    None => lock(&self.current).clone(),
                };
                (f.take().expect("called once"))(&current)
            }
        }
    }

    fn current(
        &self,
        generation: u64,
        live: impl FnOnce() -> Vec<Range>,
        step: u64,
    ) -> Arc<Snapshot> {
        let mut current = lock(&self.current);
        let first = current.generation == u64::MAX;
        if current.generation != generation && (first || self.rebuild_due()) {
            let started = now_ns();
            let (snapshot, gone) = rebuild(&current, generation, live(), step);
            *current = Arc::new(snapshot);
            self.built.store(generation, Relaxed);
            let ended = now_ns();
            self.built_at.store(ended, Relaxed);
            self.build_cost
                .store(ended.saturating_sub(started), Relaxed);
            self.rebuilds.fetch_add(1, Relaxed);
            self.rebuild_ns
                .fetch_add(ended.saturating_sub(started), Relaxed);
            drop(current);
            self.retire(gone, step);
            return lock(&self.current).clone();
        }
        current.clone()
    }

    fn retire(&self, gone: Vec<Arc<BlockProfile>>, step: u64) {
        let gone: Vec<_> = gone.into_iter().filter(|p| p.uses() > 0).collect();
        if gone.is_empty() {
            return;
        }
        for profile in &gone {
            profile.retire(step);
        }
        let mut retired = lock(&self.retired);
        retired.extend(gone);
        if retired.len() > RETIRED * 2 {
            retired.sort_by_key(|p| std::cmp::Reverse(p.weight()));
            let dropped = retired.len() - RETIRED;
            retired.truncate(RETIRED);
            self.forgotten.fetch_add(dropped as u64, Relaxed);
        }
    }

    /// Every profile: the live blocks' (as of the latest snapshot) and the
    /// retired ones kept.
    pub fn profiles(&self) -> Vec<Arc<BlockProfile>> {
        let mut all = lock(&self.current).profiles.clone();
        all.extend(lock(&self.retired).iter().cloned());
        all
    }
}

/// The snapshot of `live`, keeping the profiles of blocks still there (same
/// start and size); the profiles of the others.
pub(super) fn rebuild(
    old: &Snapshot,
    generation: u64,
    mut live: Vec<Range>,
    step: u64,
) -> (Snapshot, Vec<Arc<BlockProfile>>) {
    live.sort_unstable_by_key(|(start, _, _, _)| *start);
    // Overlapping ranges (not made by CUDA) keep the first.
    live.dedup_by(|next, kept| (next.0 as u64) < kept.0 as u64 + kept.1);
    let mut snapshot = Snapshot::empty();
    snapshot.generation = generation;
    let mut gone = Vec::new();
    let mut old_index = 0;
    for (start, size, device, host) in live {
        while old_index < old.profiles.len() && old.profiles[old_index].start < start {
            gone.push(old.profiles[old_index].clone());
            old_index += 1;
        }
        let kept = old
            .profiles
            .get(old_index)
            .filter(|p| p.start == start && p.size == size);
        let profile = match kept {
            Some(profile) => {
                old_index += 1;
                profile.clone()
            }
            None => Arc::new(BlockProfile::new(start, size, device, step)),
        };
        let end = (start as u64).saturating_add(size);
        snapshot.low = snapshot.low.min(start as u64);
        snapshot.high = snapshot.high.max(end);
        snapshot.spans.push([start as u64, end]);
        snapshot.in_host.push(host);
        snapshot.profiles.push(profile);
    }
    gone.extend(old.profiles[old_index..].iter().cloned());
    snapshot.direct();
    (snapshot, gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::access::steps::Place;

    #[test]
    fn a_pointer_inside_a_block_finds_it_and_profiles_survive_rebuilds() {
        let index = BlockIndex::new();
        let blocks = vec![
            (0x1000, 0x100, 0, false),
            (0x3000, 0x1000, 0, false),
            (0x2000, 0x10, 1, false),
        ];
        let found = index.with(
            1,
            || blocks.clone(),
            0,
            |s| {
                [0xfff, 0x1000, 0x10ff, 0x1100, 0x2008, 0x3fff, 0x4000]
                    .map(|v| s.find(v).map(|i| s.profiles[i].start))
            },
        );
        assert_eq!(
            found,
            [
                None,
                Some(0x1000),
                Some(0x1000),
                None,
                Some(0x2000),
                Some(0x3000),
                None
            ]
        );
        // A use, then the middle block freed: the others keep their profile.
        index.with(
            1,
            || unreachable!(),
            0,
            |s| {
                let i = s.find(0x2000).unwrap();
                s.profiles[i].touch(
                    Place {
                        step: 0,
                        position: 0,
                    },
                    7,
                    1,
                    false,
                );
            },
        );
        let after = vec![(0x1000, 0x100, 0, false), (0x3000, 0x1000, 0, false)];
        // Past the least time between rebuilds.
        index.wait_until_due();
        let uses = index.with(
            2,
            || after,
            0,
            |s| {
                assert!(s.find(0x2008).is_none());
                s.profiles.len()
            },
        );
        assert_eq!(uses, 2);
        let all = index.profiles();
        assert_eq!(all.len(), 3, "the used block is kept among the retired");
        assert!(all.iter().any(|p| p.start == 0x2000 && p.uses() == 1));
    }

    #[test]
    fn freed_profiles_are_bounded_keeping_the_most_used() {
        let index = BlockIndex::new();
        for round in 0..(RETIRED as u64 * 4) {
            // A new block each round, the previous one freed.
            let start = 0x10_0000 + round as usize * 0x1000;
            // Each round's rebuild is due, as it is once its interval passed.
            index.built_at.store(0, Relaxed);
            index.with(
                round + 1,
                || vec![(start, 0x1000, 0, false)],
                0,
                |s| {
                    let profile = &s.profiles[0];
                    // The first block is used most of all.
                    let uses = if round == 0 { 1000 } else { round % 7 + 1 };
                    for _ in 0..uses {
                        profile.touch(
                            Place {
                                step: 0,
                                position: 0,
                            },
                            0,
                            1,
                            false,
                        );
                    }
                },
            );
        }
        let all = index.profiles();
        assert!(all.len() <= 2 * RETIRED + 1, "{}", all.len());
        assert!(index.forgotten.load(Relaxed) > 0);
        assert!(
            all.iter().any(|p| p.uses() == 1000),
            "the most used is kept, however long ago it was freed"
        );
    }

    #[test]
    fn the_directory_finds_what_a_search_of_all_blocks_finds() {
        // Blocks spread evenly, clustered far apart, and of every size.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for layout in 0..3u64 {
            let mut blocks = Vec::new();
            let mut at = 0x7f00_0000_0000usize;
            for i in 0..300 {
                let size = 512 << (next() % 14);
                if layout == 1 && i == 150 {
                    at += 1 << 40;
                }
                blocks.push((at, size, 0, false));
                at += size as usize + (next() % 3) as usize * 4096 * (layout as usize);
            }
            let index = BlockIndex::new();
            index.with(
                layout + 1,
                || blocks.clone(),
                0,
                |s| {
                    for _ in 0..20_000 {
                        let (start, size, _, _) = blocks[(next() % 300) as usize];
                        let probe = (start as u64 + next() % (size * 2)).wrapping_sub(size / 2);
                        let expected = blocks
                            .iter()
                            .position(|(b, n, _, _)| probe >= *b as u64 && probe < *b as u64 + n);
                        assert_eq!(s.find(probe), expected, "{probe:#x} in layout {layout}");
                    }
                },
            );
        }
    }

    impl BlockIndex {
        /// Sleeps until a rebuild is due (ten times the last build's cost,
        /// which a loaded machine makes longer than the least wait).
        fn wait_until_due(&self) {
            while !self.rebuild_due() {
                std::thread::sleep(std::time::Duration::from_micros(REBUILD_EVERY / 1000));
            }
        }
    }

    #[test]
    fn rebuilds_wait_ten_times_their_cost_and_launches_read_the_latest_meanwhile() {
        let index = BlockIndex::new();
        let builds = AtomicU64::new(0);
        let mut generation = 1;
        let started = now_ns();
        // A block allocated before each of many launches.
        while now_ns() - started < 20 * REBUILD_EVERY {
            generation += 1;
            let live = || {
                builds.fetch_add(1, Relaxed);
                vec![(0x1000, 0x100, 0, false)]
            };
            assert!(index.with(generation, live, 0, |s| s.find(0x1010).is_some()));
        }
        let builds = builds.load(Relaxed);
        assert!(
            generation > 100 && builds <= 21,
            "{builds} builds for {generation} generations"
        );
        // Once due again, the latest generation is built.
        index.wait_until_due();
        let found = index.with(
            generation + 1,
            || vec![(0x5000, 0x100, 0, false)],
            0,
            |s| s.find(0x5000),
        );
        assert!(found.is_some());
    }

    #[test]
    fn threads_share_one_rebuild() {
        let index = BlockIndex::new();
        let builds = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        index.with(
                            5,
                            || {
                                builds.fetch_add(1, Relaxed);
                                vec![(0x1000, 0x100, 0, false)]
                            },
                            0,
                            |s| assert!(s.find(0x1010).is_some()),
                        );
                    }
                });
            }
        });
        assert_eq!(builds.load(Relaxed), 1);
    }
}
