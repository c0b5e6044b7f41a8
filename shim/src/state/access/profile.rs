//! One block's access profile: how often launches named it, in how many
//! steps, where in its latest steps it was first and last used, on which
//! stream, and by which kind of call. Fixed size, updated with relaxed
//! atomics: two threads naming one block at once may blur a step's
//! positions, never the totals.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::steps::Place;

/// Which kind of call named a block: a kernel's own parameters, the
/// operands of a library call (cuBLAS, cuDNN) made for it, or a copy's or
/// memset's.
pub const VIA_KERNEL: u64 = 1;
pub const VIA_LIBRARY: u64 = 2;
pub const VIA_COPY: u64 = 4;

/// Cache-line aligned: blocks named by launches on different threads do not
/// share a line. What a launch updates lies in the first line, so that a
/// launch made after the job's own work has evicted the caches misses once
/// per block it names; the rest is touched once per step of the block's use.
#[repr(C, align(64))]
pub struct BlockProfile {
    /// The step of its latest use, plus one (0: never used), its uses in
    /// that step, the positions of its first and last, and which kinds of
    /// call named it then.
    step: AtomicU64,
    in_step: AtomicU64,
    first: AtomicU64,
    last: AtomicU64,
    step_via: AtomicU64,
    uses: AtomicU64,
    stream: AtomicU64,
    via: AtomicU64,
    pub start: usize,
    pub size: u64,
    pub device: u32,
    /// Steps begun when the block was first seen, and when it was freed
    /// (`u64::MAX` while it lives).
    pub born: u64,
    freed: AtomicU64,
    steps_used: AtomicU64,
    /// Uses that found it in host memory (spilled): touched only then.
    uses_in_host: AtomicU64,
    /// The same for the step before that one in which it was used.
    prior_step: AtomicU64,
    prior_in_step: AtomicU64,
    prior_first: AtomicU64,
    prior_last: AtomicU64,
    prior_via: AtomicU64,
}

/// Uses of every block of the process, and of them those that found
/// their block in host memory, for `vramshare ps`.
pub static USES: AtomicU64 = AtomicU64::new(0);
pub static USES_IN_HOST: AtomicU64 = AtomicU64::new(0);

/// A block's uses within one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepUse {
    pub step: u64,
    pub uses: u64,
    pub first: u64,
    pub last: u64,
    pub via: u64,
}

impl BlockProfile {
    pub fn new(start: usize, size: u64, device: u32, born: u64) -> Self {
        BlockProfile {
            start,
            size,
            device,
            born,
            freed: AtomicU64::new(u64::MAX),
            uses: AtomicU64::new(0),
            steps_used: AtomicU64::new(0),
            uses_in_host: AtomicU64::new(0),
            step: AtomicU64::new(0),
            in_step: AtomicU64::new(0),
            first: AtomicU64::new(0),
            last: AtomicU64::new(0),
            prior_step: AtomicU64::new(0),
            prior_in_step: AtomicU64::new(0),
            prior_first: AtomicU64::new(0),
            prior_last: AtomicU64::new(0),
            step_via: AtomicU64::new(0),
            prior_via: AtomicU64::new(0),
            stream: AtomicU64::new(0),
            via: AtomicU64::new(0),
        }
    }

    /// A launch at `place`, on `stream`, named the block, which was in host
    /// memory if `in_host`.
    #[inline]
    pub fn touch(&self, place: Place, stream: u64, via: u64, in_host: bool) {
        USES.fetch_add(1, Relaxed);
        if in_host {
            self.uses_in_host.fetch_add(1, Relaxed);
            USES_IN_HOST.fetch_add(1, Relaxed);
        }
        let tag = place.step + 1;
        let seen = self.step.load(Relaxed);
        if seen != tag && self.step.swap(tag, Relaxed) != tag {
            if seen != 0 {
                self.prior_step.store(seen, Relaxed);
                self.prior_in_step
                    .store(self.in_step.load(Relaxed), Relaxed);
                self.prior_first.store(self.first.load(Relaxed), Relaxed);
                self.prior_last.store(self.last.load(Relaxed), Relaxed);
                self.prior_via.store(self.step_via.load(Relaxed), Relaxed);
            }
            self.in_step.store(0, Relaxed);
            self.step_via.store(0, Relaxed);
            self.first.store(place.position, Relaxed);
            self.steps_used.fetch_add(1, Relaxed);
        }
        // The total is exact; the step's own counts are plain stores.
        self.uses.fetch_add(1, Relaxed);
        self.in_step.store(self.in_step.load(Relaxed) + 1, Relaxed);
        self.last.store(place.position, Relaxed);
        if self.stream.load(Relaxed) != stream {
            self.stream.store(stream, Relaxed);
        }
        if self.step_via.load(Relaxed) & via != via {
            self.step_via.fetch_or(via, Relaxed);
            self.via.fetch_or(via, Relaxed);
        }
    }

    /// When it was last used, as (step plus one, position): later uses
    /// compare greater (0 if it was never used).
    pub fn last_use(&self) -> (u64, u64) {
        (self.step.load(Relaxed), self.last.load(Relaxed))
    }

    pub fn retire(&self, step: u64) {
        self.freed.store(step, Relaxed);
    }

    pub fn uses(&self) -> u64 {
        self.uses.load(Relaxed)
    }
    pub fn steps_used(&self) -> u64 {
        self.steps_used.load(Relaxed)
    }
    pub fn uses_in_host(&self) -> u64 {
        self.uses_in_host.load(Relaxed)
    }
    pub fn stream(&self) -> u64 {
        self.stream.load(Relaxed)
    }
    pub fn via(&self) -> u64 {
        self.via.load(Relaxed)
    }
    /// Steps begun when it was freed, if it was.
    pub fn freed(&self) -> Option<u64> {
        Some(self.freed.load(Relaxed)).filter(|step| *step != u64::MAX)
    }

    /// Its uses in `step`, if that was one of its two latest steps of use.
    pub fn in_step(&self, step: u64) -> Option<StepUse> {
        let tag = step + 1;
        if self.step.load(Relaxed) == tag {
            return Some(StepUse {
                step,
                uses: self.in_step.load(Relaxed),
                first: self.first.load(Relaxed),
                last: self.last.load(Relaxed),
                via: self.step_via.load(Relaxed),
            });
        }
        (self.prior_step.load(Relaxed) == tag).then(|| StepUse {
            step,
            uses: self.prior_in_step.load(Relaxed),
            first: self.prior_first.load(Relaxed),
            last: self.prior_last.load(Relaxed),
            via: self.prior_via.load(Relaxed),
        })
    }

    /// Whether the block lived through all of `step` (as far as the shim
    /// saw: from the step it was first seen in, to the one it was freed in).
    pub fn lived_through(&self, step: u64) -> bool {
        self.born <= step && self.freed().is_none_or(|freed| freed > step)
    }

    /// Steps it lived in (wholly or in part) from step `found` to the
    /// `current` one.
    pub fn steps_alive(&self, found: u64, current: u64) -> u64 {
        let end = self.freed().unwrap_or(current).min(current);
        (end + 1).saturating_sub(self.born.max(found))
    }

    /// How much it matters for placement: bytes times uses.
    pub fn weight(&self) -> u128 {
        self.size as u128 * self.uses() as u128
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_a_launch_updates_lies_in_one_cache_line() {
        let profile = super::BlockProfile::new(0, 0, 0, 0);
        let base = &profile as *const _ as usize;
        for field in [
            &profile.step,
            &profile.in_step,
            &profile.first,
            &profile.last,
            &profile.step_via,
            &profile.uses,
            &profile.stream,
            &profile.via,
        ] {
            assert!(field as *const _ as usize + 8 - base <= 64);
        }
    }

    use super::*;

    #[test]
    fn a_step_rolls_into_the_prior_one() {
        let profile = BlockProfile::new(0x1000, 4096, 0, 0);
        let at = |step, position| Place { step, position };
        profile.touch(at(1, 3), 7, VIA_KERNEL, false);
        profile.touch(at(1, 9), 7, VIA_KERNEL, true);
        profile.touch(at(2, 4), 8, VIA_LIBRARY, false);
        assert_eq!(profile.uses_in_host(), 1);
        assert_eq!(profile.uses(), 3);
        assert_eq!(profile.steps_used(), 2);
        assert_eq!(
            profile.in_step(1),
            Some(StepUse {
                step: 1,
                uses: 2,
                first: 3,
                last: 9,
                via: VIA_KERNEL,
            })
        );
        assert_eq!(
            profile.in_step(2),
            Some(StepUse {
                step: 2,
                uses: 1,
                first: 4,
                last: 4,
                via: VIA_LIBRARY,
            })
        );
        assert_eq!(profile.in_step(0), None);
        assert_eq!(profile.stream(), 8);
        assert_eq!(profile.via(), VIA_KERNEL | VIA_LIBRARY);
        assert!(profile.lived_through(5));
        profile.retire(4);
        assert!(profile.lived_through(3) && !profile.lived_through(4));
        assert_eq!(profile.steps_alive(0, 10), 5, "steps 0 to 4");
        assert_eq!(profile.steps_alive(2, 10), 3, "steps 2 to 4");
    }
}
