//! Host memory that no tier block holds any more (its block was freed or
//! given back), kept for the next block of its size. Making host memory
//! pins it, at a few GB/s; a job that frees and allocates the same sizes
//! every step (a tensor per block) would otherwise pin its spilled bytes
//! again at every step. What is kept stays under the most the device's
//! blocks ever had in host memory at once.

use std::sync::atomic::Ordering::Relaxed;

use crate::config::Device;
use crate::state::{lock, State};

use super::backing;

/// Host memory of `size` bytes for a block of `device`: a spare one, else
/// made.
pub fn take(state: &State, size: u64, device: Device) -> backing::Result<u64> {
    let spare = {
        let mut spares = lock(&state.tier.spare_host);
        spares
            .iter()
            .rposition(|&(bytes, of, _)| bytes == size && of == device)
            .map(|index| spares.swap_remove(index).2)
    };
    match spare {
        Some(handle) => Ok(handle),
        None => backing::create(size, device, false),
    }
}

/// Host memory a block held (unmapped everywhere now): kept if it fits
/// under the bound, else released.
pub fn give(state: &State, size: u64, device: Device, handle: u64) {
    let bound = state.ledger.device(device).peak_spilled.load(Relaxed);
    {
        let mut spares = lock(&state.tier.spare_host);
        let held: u64 = spares.iter().map(|&(bytes, _, _)| bytes).sum();
        if held + size <= bound {
            spares.push((size, device, handle));
            return;
        }
    }
    backing::release(handle);
}
