//! Pools: processes that share one device budget (`VRAMSHARE_POOL=NAME`).
//!
//! Layout (native byte order; `pools` in `VRAMSHARE_DIR`): a 64-byte header
//! (magic `VSHPOOL1`, version 3, slot size, slot count, as in the ring),
//! then the slots. A slot is free, being claimed (or freed), or in use; in
//! use, it has a name, a count of members, and per device a budget and the
//! device bytes its members hold. The last member to leave frees it. A slot
//! in any other state (corrupt, or of a newer vramshare) is passed over.
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
use crate::size::{Device, MAX_DEVICES};

pub const MAGIC: u64 = u64::from_ne_bytes(*b"VSHPOOL1");
pub const VERSION: u32 = 3;
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
    /// Processes in the pool (and, for an instant, ones checking that the
    /// slot is still the pool they are joining): the last to leave frees
    /// the slot, so that the table never fills with pools of the past and a
    /// pool made again starts from its first member's budget.
    members: AtomicU32,
    _pad: AtomicU32,
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

    pub fn budget(&self, device: Device) -> Option<u64> {
        let budget = self.budget[device.index()].load(Ordering::Acquire);
        (budget != NO_QUOTA).then_some(budget)
    }

    /// Sets the budget (`None`: no limit); returns the one before.
    pub fn set_budget(&self, device: Device, budget: Option<u64>) -> Option<u64> {
        let before = self.budget[device.index()].swap(budget.unwrap_or(NO_QUOTA), Ordering::AcqRel);
        (before != NO_QUOTA).then_some(before)
    }

    /// Sets the budget only if the pool has none yet; returns the budget
    /// that applies.
    pub fn offer_budget(&self, device: Device, budget: u64) -> u64 {
        match self.budget[device.index()].compare_exchange(
            NO_QUOTA,
            budget,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => budget,
            Err(running) => running,
        }
    }

    pub fn device_bytes(&self, device: Device) -> u64 {
        self.device_bytes[device.index()].load(Ordering::Acquire)
    }

    /// Reserves `size` bytes on `device` if the pool's budget allows them.
    pub fn try_reserve(&self, device: Device, size: u64) -> bool {
        self.try_reserve_as(device, size, false, 0)
    }

    /// The same for a member that leaves room to others: the last
    /// [`LOW_PRIORITY_HEADROOM_DIVISOR`]th of the budget if it is of low
    /// priority (`low`), and `leave` bytes (what the high-priority members
    /// want).
    pub fn try_reserve_as(&self, device: Device, size: u64, low: bool, leave: u64) -> bool {
        let budget = &self.budget[device.index()];
        self.device_bytes[device.index()]
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
    pub fn reserve(&self, device: Device, size: u64) {
        self.device_bytes[device.index()].fetch_add(size, Ordering::AcqRel);
    }

    pub fn unreserve(&self, device: Device, size: u64) {
        let _ = self.device_bytes[device.index()].fetch_update(
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

    /// How many processes are in the pool.
    pub fn members(&self) -> u32 {
        self.members.load(Ordering::Acquire)
    }

    /// Takes one member out (one that left, or died and was reaped); true
    /// if it was the last, whose caller then frees the slot
    /// ([`Pools::free_if_empty`]).
    pub fn leave(&self) -> bool {
        let before = self
            .members
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        before == 1
    }

    /// Frees the slot unless a process is in it, or joining it at this
    /// instant (then it stays, and that process is its member). Only under
    /// the table's lock, as making a pool is.
    fn free_if_empty(&self) {
        if self
            .state
            .compare_exchange(IN_USE, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if self.members.load(Ordering::Acquire) != 0 {
            self.state.store(IN_USE, Ordering::Release);
            return;
        }
        self.clear();
    }

    /// Empties the slot and marks it free.
    fn clear(&self) {
        self.name_len.store(0, Ordering::Relaxed);
        for device in 0..MAX_DEVICES {
            self.budget[device].store(NO_QUOTA, Ordering::Relaxed);
            self.device_bytes[device].store(0, Ordering::Relaxed);
        }
        self.state.store(FREE, Ordering::Release);
    }

    /// Counts a joining process in, if the slot is still pool `name`.
    fn enter(&self, name: &str) -> bool {
        self.members.fetch_add(1, Ordering::AcqRel);
        if self.state.load(Ordering::Acquire) == IN_USE && self.name() == name {
            return true;
        }
        // Freed (or being freed) meanwhile: not ours to count in.
        let _ = self
            .members
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
        false
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

impl<M: AsRef<[u8]>> Pools<crate::files::Mapped<M>> {
    /// The table file's lock ([`crate::files::Mapped::lock`]), for
    /// [`Pools::join`] and [`Pools::free_if_empty`].
    pub fn lock(&self, patience: std::time::Duration) -> Option<crate::files::FileLock> {
        self.map.lock(patience)
    }
}

/// Why a process could not join its pool.
#[derive(Debug, PartialEq, Eq)]
pub enum JoinError {
    /// Every slot holds a pool with members.
    Full,
    /// The table's lock was held too long (by a stopped process).
    Locked,
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Pools<M> {
    /// Joins pool `name`, making it if there is none. Finding a running
    /// pool takes no lock; making one, and freeing one ([`free_if_empty`](Pools::free_if_empty)),
    /// happen under `lock` (the table file's lock, held for as long as its
    /// guard lives; `None`: it could not be had), after a look at every
    /// slot, so that two processes making one pool at once end in one, and
    /// a name is never in two slots. A slot in a state no vramshare writes
    /// (corrupt, or of a newer version) is passed over.
    pub fn join<G>(
        &self,
        name: &str,
        lock: impl FnOnce() -> Option<G>,
    ) -> Result<(u32, &PoolSlot), JoinError> {
        if let Some(found) = self.enter(name) {
            return Ok(found);
        }
        let _guard = lock().ok_or(JoinError::Locked)?;
        if let Some(found) = self.enter(name) {
            return Ok(found);
        }
        let slots = self.slots();
        // Under the lock nothing is being made or freed: a slot caught
        // half-way was left so by a process that died there.
        for slot in slots {
            if slot.state.load(Ordering::Acquire) == CLAIMING {
                slot.clear();
            }
        }
        if !slots
            .iter()
            .any(|slot| slot.state.load(Ordering::Acquire) == FREE)
        {
            // Pools whose last member could not free them.
            for slot in slots.iter().filter(|slot| slot.members() == 0) {
                slot.free_if_empty();
            }
        }
        let start = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        for probe in 0..slots.len() {
            let index = (start as usize).wrapping_add(probe) % slots.len();
            let slot = &slots[index];
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
            // Added, not stored: a process checking the slot at this
            // instant takes its own count back out.
            slot.members.fetch_add(1, Ordering::AcqRel);
            slot.state.store(IN_USE, Ordering::Release);
            return Ok((index as u32, slot));
        }
        Err(JoinError::Full)
    }

    /// Pool `name`, if it runs, with this process counted in.
    fn enter(&self, name: &str) -> Option<(u32, &PoolSlot)> {
        self.slots()
            .iter()
            .enumerate()
            .find(|(_, slot)| slot.in_use() && slot.name() == name && slot.enter(name))
            .map(|(index, slot)| (index as u32, slot))
    }

    /// After the last member left pool `index` ([`PoolSlot::leave`]): frees
    /// its slot, under `lock`. Without the lock it stays, empty, and is
    /// freed when a pool is next made in a full table.
    pub fn free_if_empty<G>(&self, index: u32, lock: impl FnOnce() -> Option<G>) {
        if let (Some(slot), Some(_guard)) = (self.slots().get(index as usize), lock()) {
            slot.free_if_empty();
        }
    }
}

#[cfg(test)]
mod tests;
