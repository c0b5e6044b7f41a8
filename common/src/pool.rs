//! Pools: processes that share one device budget (`VRAMSHARE_POOL=NAME`).
//!
//! Layout (native byte order; `pools` in `VRAMSHARE_DIR`): a 64-byte header
//! (magic `VSHPOOL1`, version 1, slot size, slot count, as in the ring),
//! then the slots. A slot is free, being claimed, or in use; in use, it has
//! a name and per device a budget and the device bytes its members hold.
//! (What a high-priority member waits for is in its own registry slot, so
//! that it ends with the member: [`crate::registry::DeviceCounters::wanted`].)
//!
//! Reservation is one compare-and-swap on the pool's counter, checked
//! against the budget, so processes allocating at once can never take the
//! pool over its budget, not even for a moment. A member's bytes are also
//! in its own registry slot; when a member dies without giving them back
//! (SIGKILL), the first live member to notice (its shim looks every 50 ms)
//! subtracts them, once, by marking the dead member's slot exited
//! ([`crate::registry::Registry::reap_dead`]). An allocation a member was
//! reserving at the instant it was killed cannot be told apart; the count
//! is cleared when the pool has no member left. No lock is ever held.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::files::SharedFile;
use crate::registry::NO_QUOTA;
use crate::size::MAX_DEVICES;

pub const MAGIC: u64 = u64::from_ne_bytes(*b"VSHPOOL1");
pub const VERSION: u32 = 2;
pub const HEADER_LEN: usize = 64;
pub const DEFAULT_POOLS: u64 = 64;
/// Longest pool name, in bytes.
pub const NAME_BYTES: usize = 48;
/// What a pool name may be made of.
pub const NAME_FORMS: &str = "1 to 48 letters, digits, '.', '_' or '-'";

const FREE: u32 = 0;
const CLAIMING: u32 = 1;
const IN_USE: u32 = 2;

#[repr(C)]
pub struct PoolSlot {
    state: AtomicU32,
    name_len: AtomicU32,
    name: [AtomicU64; NAME_BYTES / 8],
    /// Per device: the budget in bytes, or [`NO_QUOTA`].
    budget: [AtomicU64; MAX_DEVICES],
    /// Per device: the bytes the members hold on the device.
    device_bytes: [AtomicU64; MAX_DEVICES],
}

/// The share of a budget that low-priority members leave to the others
/// (1/8): when the pool fills, their allocations spill first, and they are
/// promoted last.
pub const LOW_PRIORITY_HEADROOM_DIVISOR: u64 = 8;

pub const SLOT_SIZE: usize = std::mem::size_of::<PoolSlot>();

/// Checks a pool name: `Err` says what is wrong.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a pool name; accepted forms: {NAME_FORMS}"
        ))
    }
}

impl PoolSlot {
    pub fn name(&self) -> String {
        let len = (self.name_len.load(Ordering::Acquire) as usize).min(NAME_BYTES);
        let bytes: Vec<u8> = self
            .name
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
            .take(len)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn budget(&self, device: u32) -> Option<u64> {
        let budget = self.budget[device as usize].load(Ordering::Acquire);
        (budget != NO_QUOTA).then_some(budget)
    }

    /// Sets the budget (`None`: no limit); returns the one before.
    pub fn set_budget(&self, device: u32, budget: Option<u64>) -> Option<u64> {
        let before =
            self.budget[device as usize].swap(budget.unwrap_or(NO_QUOTA), Ordering::AcqRel);
        (before != NO_QUOTA).then_some(before)
    }

    /// Sets the budget only if the pool has none yet; returns the budget
    /// that applies.
    pub fn offer_budget(&self, device: u32, budget: u64) -> u64 {
        match self.budget[device as usize].compare_exchange(
            NO_QUOTA,
            budget,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => budget,
            Err(running) => running,
        }
    }

    pub fn device_bytes(&self, device: u32) -> u64 {
        self.device_bytes[device as usize].load(Ordering::Acquire)
    }

    /// Reserves `size` bytes on `device` if the pool's budget allows them.
    pub fn try_reserve(&self, device: u32, size: u64) -> bool {
        self.try_reserve_as(device, size, false, 0)
    }

    /// The same for a member that leaves room to others: the last
    /// [`LOW_PRIORITY_HEADROOM_DIVISOR`]th of the budget if it is of low
    /// priority (`low`), and `leave` bytes (what the high-priority members
    /// want).
    pub fn try_reserve_as(&self, device: u32, size: u64, low: bool, leave: u64) -> bool {
        let budget = &self.budget[device as usize];
        self.device_bytes[device as usize]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let budget = budget.load(Ordering::Acquire);
                if budget == NO_QUOTA {
                    return used.checked_add(size);
                }
                let headroom = if low {
                    budget / LOW_PRIORITY_HEADROOM_DIVISOR
                } else {
                    0
                };
                let cap = budget.saturating_sub(headroom).saturating_sub(leave);
                used.checked_add(size).filter(|total| *total <= cap)
            })
            .is_ok()
    }

    /// Adds bytes whatever the budget (memory already taken).
    pub fn reserve(&self, device: u32, size: u64) {
        self.device_bytes[device as usize].fetch_add(size, Ordering::AcqRel);
    }

    pub fn unreserve(&self, device: u32, size: u64) {
        let _ = self.device_bytes[device as usize].fetch_update(
            Ordering::AcqRel,
            Ordering::Acquire,
            |used| Some(used.saturating_sub(size)),
        );
    }

    /// With no member left, the pool holds nothing: sets each device's
    /// count to 0 unless it changed since `observed` (a process that joined
    /// meanwhile). This repairs the one thing reaping cannot know: an
    /// allocation a member was making at the instant it was killed.
    pub fn clear_if_unchanged(&self, observed: &[u64; MAX_DEVICES]) {
        for (counter, seen) in self.device_bytes.iter().zip(observed) {
            let _ = counter.compare_exchange(*seen, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Each device's count, for [`PoolSlot::clear_if_unchanged`].
    pub fn counts(&self) -> [u64; MAX_DEVICES] {
        std::array::from_fn(|d| self.device_bytes[d].load(Ordering::Acquire))
    }

    pub fn in_use(&self) -> bool {
        self.state.load(Ordering::Acquire) == IN_USE
    }
}

/// The pools file's layout, for [`crate::files`].
pub struct PoolFile;

impl SharedFile for PoolFile {
    const NAME: &'static str = "pools";
    const WHAT: &'static str = "pool table";
    const MAGIC: u64 = MAGIC;
    const VERSION: u32 = VERSION;
    const HEADER_LEN: usize = HEADER_LEN;
    const SLOT_SIZE: usize = SLOT_SIZE;
    const SLOTS: u64 = DEFAULT_POOLS;
}

pub struct Pools<M> {
    map: M,
}

impl<M: AsRef<[u8]>> Pools<M> {
    pub fn new(map: M) -> Result<Pools<M>, String> {
        PoolFile::validate(map.as_ref())?;
        Ok(Pools { map })
    }

    pub fn slots(&self) -> &[PoolSlot] {
        // SAFETY: the mapping passed validation in `new`; slots are made of
        // atomics only.
        unsafe { crate::files::slots::<PoolFile, PoolSlot>(self.map.as_ref()) }
    }

    /// The pool of this name, with its index.
    pub fn find(&self, name: &str) -> Option<(u32, &PoolSlot)> {
        self.slots()
            .iter()
            .enumerate()
            .find(|(_, s)| s.in_use() && s.name() == name)
            .map(|(i, s)| (i as u32, s))
    }

    pub fn get(&self, index: u32) -> Option<&PoolSlot> {
        self.slots().get(index as usize).filter(|s| s.in_use())
    }

    /// Every pool in use, with its index.
    pub fn in_use(&self) -> Vec<(u32, &PoolSlot)> {
        self.slots()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.in_use())
            .map(|(i, s)| (i as u32, s))
            .collect()
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Pools<M> {
    /// The pool of this name, made if there is none (`None`: the table is
    /// full). Every process looks for a name along the same sequence of
    /// slots (from a hash of the name), and a slot being claimed is waited
    /// for (up to a second) before it is passed: two processes making the
    /// same pool at once end up in one.
    pub fn join(&self, name: &str) -> Option<(u32, &PoolSlot)> {
        let slots = self.slots();
        if slots.is_empty() {
            return None;
        }
        let start = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        for probe in 0..slots.len() {
            let index = (start as usize).wrapping_add(probe) % slots.len();
            let slot = &slots[index];
            let waited = std::time::Instant::now();
            loop {
                match slot.state.load(Ordering::Acquire) {
                    IN_USE if slot.name() == name => return Some((index as u32, slot)),
                    IN_USE => break,
                    CLAIMING if waited.elapsed() < std::time::Duration::from_secs(1) => {
                        std::thread::yield_now()
                    }
                    CLAIMING => break,
                    FREE => {
                        if slot
                            .state
                            .compare_exchange(FREE, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                        {
                            continue;
                        }
                        let mut bytes = [0u8; NAME_BYTES];
                        bytes[..name.len()].copy_from_slice(name.as_bytes());
                        for (cell, chunk) in slot.name.iter().zip(bytes.chunks_exact(8)) {
                            cell.store(
                                u64::from_ne_bytes(chunk.try_into().unwrap()),
                                Ordering::Relaxed,
                            );
                        }
                        slot.name_len.store(name.len() as u32, Ordering::Relaxed);
                        for device in 0..MAX_DEVICES {
                            slot.budget[device].store(NO_QUOTA, Ordering::Relaxed);
                            slot.device_bytes[device].store(0, Ordering::Relaxed);
                        }
                        slot.state.store(IN_USE, Ordering::Release);
                        return Some((index as u32, slot));
                    }
                    // A state no vramshare writes (a corrupt file): passed
                    // over like a taken slot, never retried forever.
                    _ => break,
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::open_or_create;

    #[test]
    fn a_pool_is_joined_by_name_and_holds_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let pools = Pools::new(open_or_create::<PoolFile>(dir.path()).unwrap()).unwrap();
        let (a, pool) = pools.join("team-a").unwrap();
        let (again, _) = pools.join("team-a").unwrap();
        let (b, _) = pools.join("team-b").unwrap();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_eq!(pool.budget(0), None);
        assert!(pool.try_reserve(0, u64::MAX / 2), "no budget: no limit");
        pool.unreserve(0, u64::MAX / 2);
        assert_eq!(pool.offer_budget(0, 100), 100);
        assert_eq!(pool.offer_budget(0, 50), 100, "the running budget stays");
        assert!(pool.try_reserve(0, 60));
        assert!(!pool.try_reserve(0, 41));
        assert!(pool.try_reserve(0, 40));
        assert_eq!(pool.device_bytes(0), 100);
        pool.unreserve(0, 1000);
        assert_eq!(pool.device_bytes(0), 0, "never below zero");
        assert_eq!(pool.set_budget(0, None), Some(100));
        pool.set_budget(2, Some(800));
        assert!(
            !pool.try_reserve_as(2, 701, true, 0),
            "low priority leaves 1/8"
        );
        assert!(
            !pool.try_reserve_as(2, 601, true, 100),
            "and what high-priority members want"
        );
        assert!(pool.try_reserve_as(2, 600, true, 100));
        assert!(!pool.try_reserve_as(2, 101, false, 100));
        assert!(pool.try_reserve_as(2, 100, false, 100));
        assert!(
            pool.try_reserve_as(2, 100, false, 0),
            "the others may take it"
        );
        assert_eq!(pools.in_use().len(), 2);
        assert!(check_name("team-a.v2_x").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"x".repeat(49)).is_err());
    }

    #[test]
    fn threads_reserving_at_once_never_pass_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let pools = Pools::new(open_or_create::<PoolFile>(dir.path()).unwrap()).unwrap();
        let (_, pool) = pools.join("p").unwrap();
        pool.offer_budget(1, 1000);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for i in 0..20_000u64 {
                        let size = 1 + i % 97;
                        if pool.try_reserve(1, size) {
                            assert!(pool.device_bytes(1) <= 1000);
                            pool.unreserve(1, size);
                        }
                    }
                });
            }
        });
        assert_eq!(pool.device_bytes(1), 0);
    }
}
