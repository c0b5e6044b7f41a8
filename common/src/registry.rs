//! The process registry: one slot per live process under vramshare, with
//! its identity, quota and per-device counters, updated by the shim as it
//! goes (the counters *are* the shim's ledger counters, so an update costs
//! nothing extra) and read by `vramshare ps` and `top`.
//!
//! Layout (native byte order; `registry` in `VRAMSHARE_DIR`): a 64-byte
//! header (magic `VSHREG01`, version 5, slot size, slot count, as in the
//! ring), then the slots. A slot is free, being claimed, live, or exited
//! (kept, with the process's numbers at exit, until a new process needs
//! the slot: `vramshare dump` names the processes of the events it finds
//! from there). Never-used slots are taken before exited ones. A live
//! slot is trusted only while its pid is running *with the start time the
//! slot recorded*: a process killed with SIGKILL leaves its slot live, and
//! readers see it as dead (and the next process to claim a slot reclaims it).
//! Every field is an atomic: readers never see a torn number.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::files::SharedFile;
use crate::process;
use crate::settings::{Priority, Spill};
use crate::size::MAX_DEVICES;

pub const MAGIC: u64 = u64::from_ne_bytes(*b"VSHREG01");
pub const VERSION: u32 = 7;
pub const HEADER_LEN: usize = 64;
/// Room for the processes of a big node: 1,024 slots of 1.8 KiB.
pub const DEFAULT_SLOTS: u64 = 1024;
/// Bytes of the command line kept.
pub const CMDLINE_BYTES: usize = 224;
/// `DeviceCounters::quota` of a device without one.
pub const NO_QUOTA: u64 = u64::MAX;

const FREE: u32 = 0;
const CLAIMING: u32 = 1;
const LIVE: u32 = 2;
const EXITED: u32 = 3;

/// One device's numbers for one process.
#[repr(C)]
#[derive(Default)]
pub struct DeviceCounters {
    /// Resolved quota in bytes, or [`NO_QUOTA`].
    pub quota: AtomicU64,
    pub device_bytes: AtomicU64,
    pub spilled_bytes: AtomicU64,
    pub peak_device: AtomicU64,
    pub peak_spilled: AtomicU64,
    pub allocations: AtomicU64,
    pub spills: AtomicU64,
    pub promotions: AtomicU64,
    pub rejections: AtomicU64,
    /// Bytes a high-priority pool member wants room for: allocations
    /// waiting for it and spilled blocks it would bring back. The pool's
    /// other members demote managed blocks until the pool has that much
    /// room. Kept here rather than in the pool so that it ends with the
    /// process, however it ends.
    pub wanted: AtomicU64,
    /// Which GPU this is, whatever the process numbers it: its PCI address
    /// ([`crate::pci::code`]); 0 while unknown.
    pub pci: AtomicU64,
    /// Bytes the spill tier moved between this device and host memory,
    /// both ways.
    pub moved_bytes: AtomicU64,
}

impl DeviceCounters {
    pub fn reset(&self) {
        self.quota.store(NO_QUOTA, Ordering::Relaxed);
        for counter in [
            &self.device_bytes,
            &self.spilled_bytes,
            &self.peak_device,
            &self.peak_spilled,
            &self.allocations,
            &self.spills,
            &self.promotions,
            &self.rejections,
            &self.wanted,
            &self.pci,
            &self.moved_bytes,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Whether this device has seen anything worth showing.
    pub fn active(&self) -> bool {
        self.peak_device.load(Ordering::Relaxed) > 0
            || self.peak_spilled.load(Ordering::Relaxed) > 0
            || self.allocations.load(Ordering::Relaxed) > 0
            || self.rejections.load(Ordering::Relaxed) > 0
            || self.wanted.load(Ordering::Relaxed) > 0
            || self.quota.load(Ordering::Relaxed) != NO_QUOTA
    }

    pub fn snapshot(&self) -> DeviceInfo {
        let quota = self.quota.load(Ordering::Relaxed);
        DeviceInfo {
            quota: (quota != NO_QUOTA).then_some(quota),
            device_bytes: self.device_bytes.load(Ordering::Relaxed),
            spilled_bytes: self.spilled_bytes.load(Ordering::Relaxed),
            peak_device: self.peak_device.load(Ordering::Relaxed),
            peak_spilled: self.peak_spilled.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
            spills: self.spills.load(Ordering::Relaxed),
            promotions: self.promotions.load(Ordering::Relaxed),
            rejections: self.rejections.load(Ordering::Relaxed),
            wanted: self.wanted.load(Ordering::Relaxed),
            bus_id: crate::pci::bus_id(self.pci.load(Ordering::Relaxed)),
            moved_bytes: self.moved_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A fresh set of counters for every device, outside any shared file (for
/// a process that cannot use the registry, and for tests).
pub fn local_counters() -> Vec<DeviceCounters> {
    (0..MAX_DEVICES)
        .map(|_| {
            let counters = DeviceCounters::default();
            counters.reset();
            counters
        })
        .collect()
}

#[repr(C)]
pub struct ProcessSlot {
    state: AtomicU32,
    pid: AtomicU32,
    start_time: AtomicU64,
    /// 0: spill host, 1: spill off.
    spill: AtomicU32,
    cmdline_len: AtomicU32,
    /// When the process registered (`CLOCK_MONOTONIC` ns).
    registered_ns: AtomicU64,
    /// The pool it belongs to: 0 for none, else the pool's index + 1.
    pool: AtomicU32,
    /// 0 low, 1 normal, 2 high.
    priority: AtomicU32,
    /// The devices the process sees (after `CUDA_VISIBLE_DEVICES`); 0
    /// until its shim has asked.
    device_count: AtomicU32,
    _pad: AtomicU32,
    /// Kernel launches the shim has seen.
    launches: AtomicU64,
    /// Uses of blocks by launches, copies and library calls, and of them
    /// those that found their block in host memory.
    uses: AtomicU64,
    uses_in_host: AtomicU64,
    cmdline: [AtomicU64; CMDLINE_BYTES / 8],
    devices: [DeviceCounters; MAX_DEVICES],
}

pub const SLOT_SIZE: usize = std::mem::size_of::<ProcessSlot>();

/// A copy of a live slot.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The index of its pool in the pool table.
    pub pool: Option<u32>,
    pub priority: Priority,
    pub start_time: u64,
    pub cmdline: String,
    pub spill: Spill,
    pub registered_ns: u64,
    /// The devices it sees, 0 if not known yet.
    pub device_count: u32,
    /// Kernel launches the shim has seen.
    pub launches: u64,
    /// Uses of blocks, and of them those that found their block in host
    /// memory.
    pub uses: u64,
    pub uses_in_host: u64,
    /// Its slot was given back: at exit, or by a pool member that found it
    /// dead (its bytes then taken out of the pool). False for a process
    /// that died and was not noticed yet.
    pub exited: bool,
    /// Devices that have seen any activity or have a quota.
    pub devices: Vec<(u32, DeviceInfo)>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    pub quota: Option<u64>,
    pub device_bytes: u64,
    pub spilled_bytes: u64,
    pub peak_device: u64,
    pub peak_spilled: u64,
    pub allocations: u64,
    pub spills: u64,
    pub promotions: u64,
    pub rejections: u64,
    pub wanted: u64,
    /// The GPU's PCI bus id, as `nvidia-smi` shows it, if known: the
    /// process's device number is its own, after `CUDA_VISIBLE_DEVICES`.
    pub bus_id: Option<String>,
    /// Bytes the spill tier moved between the device and host memory.
    pub moved_bytes: u64,
}

impl ProcessSlot {
    pub fn devices(&self) -> &[DeviceCounters] {
        &self.devices
    }

    /// Puts the process in pool `index`, with a priority (0 low, 1 normal,
    /// 2 high).
    pub fn set_pool(&self, index: Option<u32>, priority: Priority) {
        self.priority.store(priority.code(), Ordering::Relaxed);
        self.pool
            .store(index.map_or(0, |i| i + 1), Ordering::Release);
    }

    /// Records how many devices the process sees.
    pub fn set_device_count(&self, count: u32) {
        self.device_count.store(count, Ordering::Relaxed);
    }

    /// The count of kernel launches, which the shim adds to.
    pub fn launches(&self) -> &AtomicU64 {
        &self.launches
    }

    /// Where the shim puts its uses of blocks: (all, found in host memory).
    pub fn uses(&self) -> (&AtomicU64, &AtomicU64) {
        (&self.uses, &self.uses_in_host)
    }

    /// How many devices the process sees; 0 until its shim has asked.
    pub fn device_count(&self) -> u32 {
        self.device_count.load(Ordering::Relaxed)
    }

    /// Gives the slot back at exit, keeping what it says for `dump`.
    /// True for the one caller that gives it back: the process at exit, or
    /// a pool member that found it dead ([`Registry::reap_dead`]), never
    /// both, so that its bytes leave its pool once.
    pub fn release(&self) -> bool {
        self.state
            .compare_exchange(LIVE, EXITED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn cmdline(&self) -> String {
        let len = (self.cmdline_len.load(Ordering::Relaxed) as usize).min(CMDLINE_BYTES);
        let bytes: Vec<u8> = self
            .cmdline
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
            .take(len)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The slot's contents if it belongs to a live process (`live`), or to
    /// one that has exited or died (`!live`).
    fn snapshot(&self, live: bool) -> Option<ProcessInfo> {
        let state = self.state.load(Ordering::Acquire);
        if state != LIVE && state != EXITED {
            return None;
        }
        let pid = self.pid.load(Ordering::Relaxed);
        let start_time = self.start_time.load(Ordering::Relaxed);
        if live != (state == LIVE && process::is_alive(pid, start_time)) {
            return None;
        }
        let pool = self.pool.load(Ordering::Relaxed);
        let info = ProcessInfo {
            pid,
            pool: pool.checked_sub(1),
            priority: Priority::from_code(self.priority.load(Ordering::Relaxed)),
            start_time,
            cmdline: self.cmdline(),
            spill: Spill::from_code(self.spill.load(Ordering::Relaxed)),
            registered_ns: self.registered_ns.load(Ordering::Relaxed),
            device_count: self.device_count.load(Ordering::Relaxed),
            launches: self.launches.load(Ordering::Relaxed),
            uses: self.uses.load(Ordering::Relaxed),
            uses_in_host: self.uses_in_host.load(Ordering::Relaxed),
            exited: state == EXITED,
            devices: self
                .devices
                .iter()
                .enumerate()
                .filter(|(_, d)| d.active())
                .map(|(i, d)| (i as u32, d.snapshot()))
                .collect(),
        };
        // Reclaimed by another process while we copied: not this one any more.
        let same = self.state.load(Ordering::Acquire) == state
            && self.pid.load(Ordering::Relaxed) == pid
            && self.start_time.load(Ordering::Relaxed) == start_time;
        same.then_some(info)
    }

    /// Whether the slot can be taken: free, exited, or held by a process
    /// that is gone.
    fn reclaimable(&self, state: u32) -> bool {
        state == FREE
            || state == EXITED
            || !process::is_alive(
                self.pid.load(Ordering::Relaxed),
                self.start_time.load(Ordering::Relaxed),
            )
    }
}

/// The registry file's layout, for [`crate::files`].
pub struct RegistryFile;

impl SharedFile for RegistryFile {
    const NAME: &'static str = "registry";
    const WHAT: &'static str = "process registry";
    const MAGIC: u64 = MAGIC;
    const VERSION: u32 = VERSION;
    const HEADER_LEN: usize = HEADER_LEN;
    const SLOT_SIZE: usize = SLOT_SIZE;
    const SLOTS: u64 = DEFAULT_SLOTS;
}

pub struct Registry<M> {
    map: M,
}

impl<M: AsRef<[u8]>> Registry<M> {
    pub fn new(map: M) -> Result<Registry<M>, String> {
        RegistryFile::validate(map.as_ref())?;
        Ok(Registry { map })
    }

    fn slots(&self) -> &[ProcessSlot] {
        // SAFETY: the mapping passed validation in `new`; slots are made of
        // atomics only.
        unsafe { crate::files::slots::<RegistryFile, ProcessSlot>(self.map.as_ref()) }
    }

    /// Every live process, in slot order.
    pub fn live(&self) -> Vec<ProcessInfo> {
        self.slots()
            .iter()
            .filter_map(|slot| slot.snapshot(true))
            .collect()
    }

    /// Members of pool `index` that died without giving their slot back
    /// (SIGKILL): each is marked exited, once across all processes, and
    /// handed to `reap` (to take its bytes out of the pool).
    pub fn reap_dead(&self, index: u32, mut reap: impl FnMut(&ProcessSlot)) {
        for slot in self.slots() {
            if slot.state.load(Ordering::Acquire) != LIVE
                || slot.pool.load(Ordering::Acquire).checked_sub(1) != Some(index)
                || process::is_alive(
                    slot.pid.load(Ordering::Relaxed),
                    slot.start_time.load(Ordering::Relaxed),
                )
            {
                continue;
            }
            if slot
                .state
                .compare_exchange(LIVE, EXITED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                reap(slot);
            }
        }
    }

    /// Per device, the bytes that the live members of pool `index` with
    /// `priority` want room for ([`DeviceCounters::wanted`]). Read by every
    /// member's shim every 50 ms: only a slot that wants something is
    /// checked for being alive, and nothing is copied.
    pub fn wanted_in_pool(&self, index: u32, priority: Priority) -> [u64; MAX_DEVICES] {
        let mut wanted = [0u64; MAX_DEVICES];
        for slot in self.slots() {
            if slot.state.load(Ordering::Acquire) != LIVE
                || slot.pool.load(Ordering::Acquire).checked_sub(1) != Some(index)
                || slot.priority.load(Ordering::Relaxed) != priority.code()
            {
                continue;
            }
            let asks: [u64; MAX_DEVICES] =
                std::array::from_fn(|d| slot.devices[d].wanted.load(Ordering::Relaxed));
            if asks.iter().all(|&ask| ask == 0)
                || !process::is_alive(
                    slot.pid.load(Ordering::Relaxed),
                    slot.start_time.load(Ordering::Relaxed),
                )
            {
                continue;
            }
            // Saturating: a corrupt or dying slot may ask for anything.
            for (total, ask) in wanted.iter_mut().zip(asks) {
                *total = total.saturating_add(ask);
            }
        }
        wanted
    }

    /// The slot of the live process `pid`, for changing its quotas.
    pub fn live_slot(&self, pid: u32) -> Option<&ProcessSlot> {
        self.slots().iter().find(|slot| {
            slot.state.load(Ordering::Acquire) == LIVE
                && slot.pid.load(Ordering::Relaxed) == pid
                && process::is_alive(pid, slot.start_time.load(Ordering::Relaxed))
        })
    }

    /// Processes that have exited (or died) and whose slots are not yet
    /// taken again, with their numbers as they left them.
    pub fn gone(&self) -> Vec<ProcessInfo> {
        self.slots()
            .iter()
            .filter_map(|slot| slot.snapshot(false))
            .collect()
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Registry<M> {
    /// Takes a slot for this process (a free one, or one whose process is
    /// gone); `None` if all are held by live processes.
    pub fn claim(
        &self,
        pid: u32,
        start_time: u64,
        cmdline: &str,
        spill: Spill,
    ) -> Option<&ProcessSlot> {
        // Never-used slots first, so that exited processes stay visible to
        // `dump` for as long as there is room.
        // A dead pool member's slot last: its bytes leave its pool when a
        // member reaps it, which taking the slot would prevent.
        let tier = |slot: &ProcessSlot| match slot.state.load(Ordering::Acquire) {
            FREE => 0,
            LIVE if slot.pool.load(Ordering::Acquire) != 0 => 2,
            _ => 1,
        };
        let slots =
            (0..3).flat_map(|wanted| self.slots().iter().filter(move |slot| tier(slot) == wanted));
        for slot in slots {
            let state = slot.state.load(Ordering::Acquire);
            if !slot.reclaimable(state) {
                continue;
            }
            if slot
                .state
                .compare_exchange(state, CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            slot.pid.store(pid, Ordering::Relaxed);
            slot.start_time.store(start_time, Ordering::Relaxed);
            slot.spill.store(spill.code(), Ordering::Relaxed);
            slot.registered_ns
                .store(process::monotonic_ns(), Ordering::Relaxed);
            let mut bytes = [0u8; CMDLINE_BYTES];
            let text = cmdline.as_bytes();
            let len = text.len().min(CMDLINE_BYTES);
            bytes[..len].copy_from_slice(&text[..len]);
            for (cell, chunk) in slot.cmdline.iter().zip(bytes.chunks_exact(8)) {
                cell.store(
                    u64::from_ne_bytes(chunk.try_into().unwrap()),
                    Ordering::Relaxed,
                );
            }
            slot.cmdline_len.store(len as u32, Ordering::Relaxed);
            slot.pool.store(0, Ordering::Relaxed);
            slot.priority
                .store(Priority::Normal.code(), Ordering::Relaxed);
            slot.device_count.store(0, Ordering::Relaxed);
            slot.launches.store(0, Ordering::Relaxed);
            slot.uses.store(0, Ordering::Relaxed);
            slot.uses_in_host.store(0, Ordering::Relaxed);
            for device in &slot.devices {
                device.reset();
            }
            slot.state.store(LIVE, Ordering::Release);
            return Some(slot);
        }
        None
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
