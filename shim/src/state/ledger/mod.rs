//! Who holds what: every pointer the shim handed out, with its size, device
//! and placement, and per device the bytes in use, their peaks and the
//! spilled blocks waiting to be promoted.
//!
//! Device bytes are reserved *before* the real allocation is made
//! ([`Ledger::try_reserve`]), so that two threads can never both squeeze
//! under the quota; spilled bytes are counted when the block is recorded.
//! [`Ledger::take`] releases whichever the block held. No lock here is ever
//! held across a call into CUDA.

use crate::config::Device;
use crate::state::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use vramshare_common::event::{Api, Placement};
use vramshare_common::pool::PoolSlot;
use vramshare_common::registry::DeviceCounters;
use vramshare_common::size::MAX_DEVICES;

mod block;
pub use block::Block;

use super::span::AddressSpan;

/// Physical memory by handle: the driver frees it once its handle is
/// released *and* nothing maps it any more, so it counts until both.
struct Physical {
    block: Block,
    mappings: u32,
    released: bool,
}

/// What `cuMemRelease` did to the count.
pub enum Released {
    /// The memory is gone: its bytes no longer count.
    Freed(Block),
    /// Still mapped: it counts until the last `cuMemUnmap`.
    StillMapped,
    /// Not a handle the shim recorded.
    Unknown,
}

pub enum Taken {
    Block(Block),
    /// A promotion is in flight; try again in a moment.
    Moving,
    /// Not a pointer the shim handed out (or already freed).
    Unknown,
}

pub struct Ledger {
    /// The pool whose budget this process shares (`VRAMSHARE_POOL`): every
    /// device byte reserved here is reserved there too.
    pool: Option<&'static PoolSlot>,
    /// A low-priority member leaves the last part of the pool's budget.
    low_priority: bool,
    /// Per device, the room this member leaves to the pool's high-priority
    /// members: what they want, as the shim's thread last read it (0 for a
    /// high-priority member).
    left_for_high: [AtomicU64; MAX_DEVICES],
    /// Keyed by address; Fx hashing, since addresses are not chosen by an
    /// adversary and SipHash would double the cost of a lookup.
    blocks: DashMap<usize, Block, FxBuildHasher>,
    /// Physical memory made with the virtual memory API (`cuMemCreate`), by
    /// handle.
    handles: DashMap<u64, Physical, FxBuildHasher>,
    /// Where that memory is mapped: address -> (handle, bytes mapped).
    /// Mapping is rare next to allocating, so one lock is enough.
    mappings: Mutex<BTreeMap<usize, (u64, usize)>>,
    /// Per-device counters: the process's slot in the shared registry (so
    /// `vramshare ps` sees them as they change), or local ones without it.
    counters: &'static [DeviceCounters],
    /// Spilled blocks per device by (size, address), so the largest come first.
    spilled: Vec<Mutex<BTreeSet<(u64, usize)>>>,
    /// Bumped whenever a block or mapping comes or goes: the launches'
    /// index of blocks is rebuilt when it changed ([`crate::state::access`]).
    generation: AtomicU64,
    /// Where every block and mapping recorded has fallen.
    span: AddressSpan,
}

/// Takes `amount` off a counter, never below zero.
fn subtract(counter: &AtomicU64, amount: u64) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |value| {
        Some(value.saturating_sub(amount))
    });
}

/// Raises a peak; reads first, so that threads below the peak do not write
/// (and bounce) its cache line on every allocation.
fn raise_peak(peak: &AtomicU64, value: u64) {
    if value > peak.load(Ordering::Relaxed) {
        peak.fetch_max(value, Ordering::Relaxed);
    }
}

impl Ledger {
    /// A ledger counting into `counters` (one per device, reset).
    pub fn new(
        counters: &'static [DeviceCounters],
        pool: Option<&'static PoolSlot>,
        low_priority: bool,
    ) -> Self {
        assert_eq!(counters.len(), MAX_DEVICES);
        Self {
            pool,
            low_priority,
            left_for_high: Default::default(),
            blocks: DashMap::with_hasher(FxBuildHasher),
            handles: DashMap::with_hasher(FxBuildHasher),
            mappings: Mutex::default(),
            counters,
            spilled: (0..MAX_DEVICES).map(|_| Mutex::default()).collect(),
            generation: AtomicU64::new(0),
            span: AddressSpan::default(),
        }
    }

    pub fn device(&self, device: Device) -> &DeviceCounters {
        &self.counters[device.index()]
    }

    /// Reserves `size` device bytes if they fit under `quota` and under the
    /// pool's budget (each atomically against every other thread, and the
    /// pool's against every other member process).
    pub fn try_reserve(&self, device: Device, size: u64, quota: u64) -> bool {
        // The pool first: a reservation the process's quota then refuses
        // is given back, so the process's own count (and its peak) only
        // ever holds bytes it got.
        if let Some(pool) = self.pool {
            let leave = self.left_for_high[device.index()].load(Ordering::Relaxed);
            if !pool.try_reserve_as(device, size, self.low_priority, leave) {
                return false;
            }
        }
        let usage = self.device(device);
        let reserved =
            usage
                .device_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(size).filter(|total| *total <= quota)
                });
        match reserved {
            Ok(before) => {
                raise_peak(&usage.peak_device, before + size);
                true
            }
            Err(_) => {
                if let Some(pool) = self.pool {
                    pool.unreserve(device, size);
                }
                false
            }
        }
    }

    /// Sets the room this member leaves to the high-priority members on
    /// `device`.
    pub fn leave_for_high(&self, device: Device, bytes: u64) {
        self.left_for_high[device.index()].store(bytes, Ordering::Relaxed);
    }

    /// Reserves `size` device bytes with no limit (memory already taken).
    pub fn reserve(&self, device: Device, size: u64) {
        let usage = self.device(device);
        let before = usage.device_bytes.fetch_add(size, Ordering::AcqRel);
        raise_peak(&usage.peak_device, before.saturating_add(size));
        if let Some(pool) = self.pool {
            pool.reserve(device, size);
        }
    }

    pub fn unreserve(&self, device: Device, size: u64) {
        subtract(&self.device(device).device_bytes, size);
        if let Some(pool) = self.pool {
            pool.unreserve(device, size);
        }
    }

    /// Records a block the real runtime handed out. Device bytes must already
    /// be reserved; spilled bytes are counted here. If the address was still
    /// recorded (freed behind the shim's back), the stale block is released
    /// and returned.
    pub fn insert(&self, ptr: usize, block: Block) -> Option<Block> {
        self.span.widen(ptr as u64, block.size);
        let stale = self.blocks.insert(ptr, block);
        self.changed();
        if let Some(old) = stale {
            self.release(ptr, &old);
        }
        if block.placement == Placement::Host {
            let candidate = (!block.tiered).then_some(ptr);
            self.count_spilled(block.device, block.spilled_part(), candidate);
        }
        stale
    }

    /// Records physical memory made for a device: on it (bytes already
    /// reserved), or on the host in its stead (counted as spilled here; such
    /// memory cannot move, so it is never promoted).
    pub fn insert_handle(&self, handle: u64, block: Block) {
        if block.placement == Placement::Host {
            self.count_spilled(block.device, block.size, None);
        }
        let physical = Physical {
            block,
            mappings: 0,
            released: false,
        };
        if let Some(stale) = self.handles.insert(handle, physical) {
            self.release_handle(&stale.block);
        }
    }

    /// `cuMemRelease` of a handle: its bytes stop counting unless it is
    /// still mapped.
    pub fn release_physical(&self, handle: u64) -> Released {
        match self.handles.entry(handle) {
            Entry::Vacant(_) => Released::Unknown,
            Entry::Occupied(mut entry) if entry.get().mappings > 0 => {
                entry.get_mut().released = true;
                Released::StillMapped
            }
            Entry::Occupied(entry) => {
                let physical = entry.remove();
                self.release_handle(&physical.block);
                Released::Freed(physical.block)
            }
        }
    }

    /// `cuMemMap` of `size` bytes of a handle at `ptr` (a handle the shim did
    /// not record, imported from another process say, is not counted here).
    pub fn map_physical(&self, ptr: usize, size: usize, handle: u64) {
        let mut mappings = lock(&self.mappings);
        if let Some(mut physical) = self.handles.get_mut(&handle) {
            self.span.widen(ptr as u64, size as u64);
            physical.mappings += 1;
            mappings.insert(ptr, (handle, size));
            self.changed();
        }
    }

    /// `cuMemUnmap` of `[ptr, ptr + size)`: the mappings inside it end; the
    /// released handles left with no mapping are freed, and returned.
    pub fn unmap_physical(&self, ptr: usize, size: usize) -> Vec<(u64, Block)> {
        let mut mappings = lock(&self.mappings);
        let end = ptr.saturating_add(size);
        let inside: Vec<(usize, u64)> = mappings
            .range(ptr..end)
            .map(|(address, (handle, _))| (*address, *handle))
            .collect();
        let mut freed = Vec::new();
        for (address, handle) in inside {
            mappings.remove(&address);
            self.changed();
            let Entry::Occupied(mut entry) = self.handles.entry(handle) else {
                continue;
            };
            let physical = entry.get_mut();
            physical.mappings = physical.mappings.saturating_sub(1);
            if physical.released && physical.mappings == 0 {
                let physical = entry.remove();
                self.release_handle(&physical.block);
                freed.push((handle, physical.block));
            }
        }
        freed
    }

    fn release_handle(&self, block: &Block) {
        match block.placement {
            Placement::Host => self.uncount_spilled(block.device, block.size, None),
            _ => self.unreserve(block.device, block.size),
        }
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// `[low, high)` holding every block and mapping ever recorded.
    pub fn span(&self) -> (u64, u64) {
        self.span.get()
    }

    /// Changes with every block or mapping that comes or goes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Every live range: blocks and mapped physical memory, as (address,
    /// size, device, whether it is in host memory).
    pub fn ranges(&self) -> Vec<(usize, u64, u32, bool)> {
        let spilled = |block: &Block| block.placement == Placement::Host;
        let mut ranges: Vec<(usize, u64, u32, bool)> = self
            .blocks
            .iter()
            .map(|e| {
                let block = e.value();
                (
                    *e.key(),
                    block.size,
                    block.device.index() as u32,
                    spilled(block),
                )
            })
            .collect();
        let mappings: Vec<(usize, u64, usize)> = lock(&self.mappings)
            .iter()
            .map(|(address, (handle, size))| (*address, *handle, *size))
            .collect();
        for (address, handle, size) in mappings {
            let (device, host) = self.handles.get(&handle).map_or((0, false), |physical| {
                let block = &physical.block;
                (block.device.index() as u32, spilled(block))
            });
            ranges.push((address, size as u64, device, host));
        }
        ranges
    }

    /// Where the block at `ptr` lives, if the shim handed it out (mapped
    /// physical memory: where its handle's memory is).
    pub fn placement_at(&self, ptr: usize) -> Option<Placement> {
        if let Some(block) = self.blocks.get(&ptr) {
            return Some(block.placement);
        }
        let handle = lock(&self.mappings).get(&ptr).map(|(handle, _)| *handle)?;
        self.handles
            .get(&handle)
            .map(|physical| physical.block.placement)
    }

    /// Removes a block and releases the bytes it held.
    /// A block from a stream-ordered pool (`pool` not 0) on the device
    /// keeps its bytes counted: the pool keeps them too, and its recount
    /// turns them into the pool's slack
    /// ([`crate::policy::stream_pools::recount_after_free`]), so that no
    /// other allocation takes that room in between.
    pub fn take(&self, ptr: usize) -> Taken {
        self.take_as(ptr, false)
    }

    /// Removes a block whose device memory the process keeps (a tier block
    /// freed in stream order): its device bytes stay counted, with no
    /// moment in which another allocation could take them too.
    pub fn take_holding(&self, ptr: usize) -> Taken {
        self.take_as(ptr, true)
    }

    fn take_as(&self, ptr: usize, holding: bool) -> Taken {
        match self.blocks.entry(ptr) {
            Entry::Vacant(_) => Taken::Unknown,
            Entry::Occupied(entry) if entry.get().moving => Taken::Moving,
            Entry::Occupied(entry) => {
                let block = entry.remove();
                self.changed();
                let kept = holding || block.pool != 0;
                if !(kept && block.placement == Placement::Device) {
                    self.release(ptr, &block);
                }
                Taken::Block(block)
            }
        }
    }

    fn release(&self, ptr: usize, block: &Block) {
        match block.placement {
            Placement::Device => self.unreserve(block.device, block.size),
            Placement::Host => {
                self.unreserve(block.device, block.device_part);
                let candidate = (!block.tiered).then_some(ptr);
                self.uncount_spilled(block.device, block.spilled_part(), candidate);
            }
            Placement::Unknown => {}
        }
    }

    /// Counts `size` spilled bytes on `device`; a block at `ptr` (not
    /// physical memory by handle) becomes a promotion candidate.
    fn count_spilled(&self, device: Device, size: u64, ptr: Option<usize>) {
        let usage = self.device(device);
        let before = usage.spilled_bytes.fetch_add(size, Ordering::AcqRel);
        raise_peak(&usage.peak_spilled, before + size);
        if let Some(ptr) = ptr {
            lock(&self.spilled[device.index()]).insert((size, ptr));
        }
    }

    /// Undoes [`Ledger::count_spilled`].
    fn uncount_spilled(&self, device: Device, size: u64, ptr: Option<usize>) {
        if let Some(ptr) = ptr {
            lock(&self.spilled[device.index()]).remove(&(size, ptr));
        }
        subtract(&self.device(device).spilled_bytes, size);
    }

    /// Spilled blocks of `device` whose host parts would fit in `room` bytes
    /// together, largest first, as (host part, address).
    pub fn promotion_candidates(&self, device: Device, mut room: u64) -> Vec<(u64, usize)> {
        let spilled = lock(&self.spilled[device.index()]);
        let mut picked = Vec::new();
        for &(size, ptr) in spilled.range(..=(room, usize::MAX)).rev() {
            if size <= room {
                picked.push((size, ptr));
                room -= size;
            }
        }
        picked
    }

    /// Marks a spilled block whose host part is `spilled` bytes as moving
    /// onto its device, whose bytes the caller has reserved; it stops
    /// counting as spilled. Returns the API that made it and the offset of
    /// its host part. `None` if it is gone, already moving, or not spilled,
    /// or if its address now holds another block (freed and handed out
    /// again since it was picked).
    pub fn begin_promotion(&self, ptr: usize, spilled: u64) -> Option<(Api, u64)> {
        let mut block = self.blocks.get_mut(&ptr)?;
        if block.moving || block.placement != Placement::Host || block.spilled_part() != spilled {
            return None;
        }
        let offset = block.device_part;
        block.moving = true;
        block.placement = Placement::Device;
        block.device_part = block.size;
        self.uncount_spilled(block.device, spilled, Some(ptr));
        self.device(block.device)
            .promotions
            .fetch_add(1, Ordering::Relaxed);
        Some((block.api, offset))
    }

    /// Managed blocks wholly on `device`, largest first, as (size, address):
    /// what a quota cut can move to the host.
    pub fn demotion_candidates(&self, device: Device) -> Vec<(u64, usize)> {
        let mut found: Vec<(u64, usize)> = self
            .blocks
            .iter()
            .filter(|entry| {
                let b = entry.value();
                b.device == device && b.managed && !b.moving && b.placement == Placement::Device
            })
            .map(|entry| (entry.value().size, *entry.key()))
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        found
    }

    /// Marks a managed block of `size` bytes on its device as moving to the
    /// host: its bytes stop counting on the device and count as spilled.
    /// Returns the API that made it; `None` if it is gone, moving, not on
    /// the device, or another block now.
    pub fn begin_demotion(&self, ptr: usize, size: u64) -> Option<Api> {
        let mut block = self.blocks.get_mut(&ptr)?;
        if block.moving
            || block.placement != Placement::Device
            || !block.managed
            || block.size != size
        {
            return None;
        }
        block.moving = true;
        block.placement = Placement::Host;
        block.device_part = 0;
        self.unreserve(block.device, size);
        self.count_spilled(block.device, size, Some(ptr));
        Some(block.api)
    }

    /// Marks the tier's block at `ptr`, of `size` bytes at `from`, as
    /// moving; the block, or `None` if it is gone, moving already, no block
    /// of the tier's, or not the block the caller picked (moved meanwhile,
    /// or freed and another made at its address).
    pub fn begin_tier_move(&self, ptr: usize, from: Placement, size: u64) -> Option<Block> {
        let mut block = self.blocks.get_mut(&ptr)?;
        if block.moving || !block.tiered || block.placement != from || block.size != size {
            return None;
        }
        block.moving = true;
        Some(*block)
    }

    /// A tier move of the block at `ptr` is over; `to` is where it now
    /// lives. Onto the device: the caller reserved its bytes, which stop
    /// counting as spilled. To the host: its device bytes are given back
    /// and count as spilled. A move that failed (`to` where it was) changes
    /// no count.
    pub fn end_tier_move(&self, ptr: usize, to: Placement) {
        if let Some(mut block) = self.blocks.get_mut(&ptr) {
            block.moving = false;
            if block.placement != to {
                let (device, size) = (block.device, block.size);
                match to {
                    Placement::Device => {
                        self.uncount_spilled(device, size, None);
                        self.device(device)
                            .promotions
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        self.unreserve(device, size);
                        self.count_spilled(device, size, None);
                    }
                }
                block.placement = to;
                block.device_part = 0;
            }
        }
        self.changed();
    }

    /// The tier's blocks on `device` now on it and not moving, as (address,
    /// size): what it may move to the host to make room.
    pub fn tier_on_device(&self, device: Device) -> Vec<(usize, u64)> {
        self.blocks
            .iter()
            .filter(|entry| {
                let b = entry.value();
                b.tiered && !b.moving && b.device == device && b.placement == Placement::Device
            })
            .map(|entry| (*entry.key(), entry.value().size))
            .collect()
    }

    /// The block recorded at `ptr` (its start), if any.
    pub fn block_at(&self, ptr: usize) -> Option<Block> {
        self.blocks.get(&ptr).map(|block| *block)
    }

    /// The move of the block at `ptr` is over. Its placement changed, and
    /// the launches' index of blocks shows placements: it is rebuilt.
    pub fn end_move(&self, ptr: usize) {
        if let Some(mut block) = self.blocks.get_mut(&ptr) {
            block.moving = false;
        }
        self.changed();
    }

    /// Every block still recorded, by address, then every physical
    /// allocation by handle.
    pub fn live_blocks(&self) -> Vec<(usize, Block)> {
        let mut live: Vec<(usize, Block)> =
            self.blocks.iter().map(|e| (*e.key(), *e.value())).collect();
        live.sort_by_key(|(ptr, _)| *ptr);
        // Then physical memory by handle (the trace names a handle as its `ptr`).
        let mut handles: Vec<(usize, Block)> = self
            .handles
            .iter()
            .map(|e| (*e.key() as usize, e.value().block))
            .collect();
        handles.sort_by_key(|(handle, _)| *handle);
        live.extend(handles);
        live
    }

    /// Devices that have seen any activity or have a quota, for the summary.
    pub fn active_devices(&self) -> impl Iterator<Item = (u32, &DeviceCounters)> {
        self.counters
            .iter()
            .enumerate()
            .map(|(d, c)| (d as u32, c))
            .filter(|(_, c)| c.active())
    }
}

#[cfg(test)]
mod tests;
