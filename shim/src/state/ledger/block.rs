//! A block the shim handed out, as the ledger records it; and the span of
//! addresses every block and mapping recorded has fallen in.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use vramshare_common::event::{Api, Placement};

use crate::config::Device;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub size: u64,
    pub device: Device,
    /// `Device`: all of it counts on the device. `Host`: a spilled block,
    /// of which the first `device_part` bytes may still prefer the device.
    pub placement: Placement,
    /// Bytes of a spilled block that live on (and count against) the device:
    /// its head, when it was allocated with room for part of it.
    pub device_part: u64,
    pub api: Api,
    /// The stream-ordered pool it came from (0: none); see [`crate::stream_pools`].
    pub pool: usize,
    /// Managed memory (spilled by the shim, or the caller's own): given back
    /// with `cudaFree` whatever its placement now.
    pub managed: bool,
    /// A promotion is changing this block's placement: a free waits for it,
    /// so that the address is not reused while CUDA is still advising it.
    pub moving: bool,
    /// Made by the spill tier ([`crate::policy::tier`]): physical memory at
    /// a reserved address, which the tier moves between device and host.
    /// Never a promotion or demotion candidate; the tier moves it.
    pub tiered: bool,
}

impl Block {
    /// Bytes of the block that live on the host.
    pub fn spilled_part(&self) -> u64 {
        match self.placement {
            Placement::Host => self.size - self.device_part.min(self.size),
            _ => 0,
        }
    }
}

/// The lowest start and highest end of every block and mapping ever
/// recorded (it only widens: a range freed stays inside). A launch's words
/// outside it name no block, however stale the launches' index is, so they
/// are passed over at one comparison each.
pub struct AddressSpan {
    low: AtomicU64,
    high: AtomicU64,
}

impl Default for AddressSpan {
    fn default() -> Self {
        AddressSpan {
            low: AtomicU64::new(u64::MAX),
            high: AtomicU64::new(0),
        }
    }
}

impl AddressSpan {
    /// Takes in `[start, start + size)`. Reads first: once the span has
    /// settled, an allocation writes nothing here.
    pub fn widen(&self, start: u64, size: u64) {
        if start < self.low.load(Relaxed) {
            self.low.fetch_min(start, Relaxed);
        }
        // A block of no bytes still has its start inside.
        let end = start.saturating_add(size.max(1));
        if end > self.high.load(Relaxed) {
            self.high.fetch_max(end, Relaxed);
        }
    }

    /// `[low, high)`; low above high while nothing was recorded.
    pub fn get(&self) -> (u64, u64) {
        (self.low.load(Relaxed), self.high.load(Relaxed))
    }
}
