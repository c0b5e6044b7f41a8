//! A block the shim handed out, as the ledger records it.

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
