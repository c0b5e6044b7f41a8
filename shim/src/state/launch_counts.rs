//! Kernel launches (and library calls), counted per thread by the call that
//! made them and by what the shim made of their operands: threads that
//! launch at once never share a counter's cache line, so a launch costs one
//! uncontended add. The counts are read back as sums over the threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use vramshare_common::event::Api;

/// Tells one process state's counts from another's (a forked child's).
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's counts, and whose they are.
    static MINE: Cell<(usize, *const AtomicU64)> = const { Cell::new((0, std::ptr::null())) };
}

/// What the shim made of a launch's operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// Its parameters named at least one live block.
    Named = 0,
    /// Its parameters were read and named no block.
    Unnamed = 1,
    /// CUDA could not say where its parameters are.
    Undecoded = 2,
    /// Launched inside a library call, whose operands were read instead.
    InLibrary = 3,
}

pub const KINDS: usize = 4;

pub struct LaunchCounts {
    id: usize,
    /// Every thread's counts, `KINDS` per `Api` code; never freed (a thread's
    /// counts outlive it, for the trace at exit).
    shards: Mutex<Vec<&'static [AtomicU64]>>,
    /// For a thread whose thread-locals are gone (it is exiting).
    shared: &'static [AtomicU64],
}

fn new_shard() -> &'static [AtomicU64] {
    Box::leak(
        (0..Api::ALL.len() * KINDS)
            .map(|_| AtomicU64::new(0))
            .collect(),
    )
}

impl LaunchCounts {
    pub fn new() -> LaunchCounts {
        let shared = new_shard();
        LaunchCounts {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(vec![shared]),
            shared,
        }
    }

    /// Counts one launch made through `api`.
    pub fn count(&self, api: Api, how: Attribution) {
        let shard = MINE
            .try_with(|mine| {
                let (owner, shard) = mine.get();
                if owner == self.id {
                    return shard;
                }
                let fresh = new_shard();
                super::lock(&self.shards).push(fresh);
                mine.set((self.id, fresh.as_ptr()));
                fresh.as_ptr()
            })
            .unwrap_or(self.shared.as_ptr());
        // SAFETY: every shard has `KINDS` counters per `Api` code
        // (`Api::ALL`'s length, and codes are places in it), and shards are
        // never freed.
        let counter = unsafe { &*shard.add(api as usize * KINDS + how as usize) };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The launches so far, by the call that made them and by what their
    /// operands named (indexed by [`Attribution`]).
    pub fn by_attribution(&self) -> Vec<(Api, [u64; KINDS])> {
        let shards = super::lock(&self.shards);
        Api::ALL
            .iter()
            .enumerate()
            .map(|(code, api)| {
                let mut counts = [0u64; KINDS];
                for (kind, count) in counts.iter_mut().enumerate() {
                    *count = shards
                        .iter()
                        .map(|shard| shard[code * KINDS + kind].load(Ordering::Relaxed))
                        .fold(0u64, u64::saturating_add);
                }
                (*api, counts)
            })
            .filter(|(_, counts)| counts.iter().any(|n| *n > 0))
            .collect()
    }

    /// The launches so far, by the call that made them.
    pub fn by_api(&self) -> Vec<(Api, u64)> {
        self.by_attribution()
            .into_iter()
            .map(|(api, counts)| (api, counts.iter().fold(0u64, |a, b| a.saturating_add(*b))))
            .collect()
    }

    /// Kernel launches in all (library calls and copies are not launches).
    pub fn total(&self) -> u64 {
        self.by_api()
            .iter()
            .filter(|(api, _)| api.is_launch())
            .map(|(_, count)| count)
            .fold(0, |a, b| a.saturating_add(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_count_apart_and_add_up() {
        let counts = LaunchCounts::new();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        counts.count(Api::__cudaLaunchKernel, Attribution::Named);
                    }
                    counts.count(Api::cuLaunchKernelEx, Attribution::Undecoded);
                });
            }
        });
        assert_eq!(
            counts.by_api(),
            [
                (Api::__cudaLaunchKernel, 40_000),
                (Api::cuLaunchKernelEx, 4)
            ]
        );
        assert_eq!(counts.total(), 40_004);
        assert_eq!(
            counts.by_attribution(),
            [
                (Api::__cudaLaunchKernel, [40_000, 0, 0, 0]),
                (Api::cuLaunchKernelEx, [0, 0, 4, 0])
            ]
        );
        // Another state's counts (a forked child's) start from nothing.
        let other = LaunchCounts::new();
        other.count(Api::cuLaunchKernel, Attribution::Unnamed);
        assert_eq!(other.total(), 1);
        assert_eq!(counts.total(), 40_004);
    }
}
