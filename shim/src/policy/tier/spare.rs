//! Host memory for the tier's blocks, made once and passed on. Making host
//! memory pins it, at a few GB/s: a job that frees and allocates tensors
//! of its step's sizes again and again (a tensor per block) would pin its
//! spilled bytes anew at every step. Host memory that no block holds any
//! more is kept as a spare, and a block that needs host memory takes, in
//! order: a spare of its size; the host memory of a kept block
//! ([`super::kept`]) of its size in host memory, which then is given up
//! whole; new memory. Only memory of the block's own size serves: the
//! driver maps a handle whole, refusing a mapping smaller than the handle
//! (or at an offset into it), so a larger spare could not be mapped at the
//! block. Of each size, the unused host memory kept (spares and kept
//! blocks') stays at most as many as the tier's blocks of that size ever
//! had on the host at once, and of all sizes together within
//! [`host_cap`]: spares are kept ([`give`]) and kept blocks in host memory
//! let go ([`over_host_bound`]) by that one rule.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::Ordering::Relaxed;

use cudart_sys::CUdeviceptr;

use crate::config::Device;
use crate::state::tier::{Backing, Kept};
use crate::state::{lock, State};

use super::backing;

/// Whether host memory of `bytes` serves a block of `size`: a handle maps
/// whole, so only one of the block's own size.
fn serves(bytes: u64, size: u64) -> bool {
    bytes == size
}

/// Host memory for a block of `size` bytes on `device`, as above.
pub fn take(state: &State, size: u64, device: Device) -> backing::Result<u64> {
    if let Some(handle) = spare(state, size, device).or_else(|| from_kept(state, size, device)) {
        return Ok(handle);
    }
    let unused = unused_host_bytes(state, device);
    let began = std::time::Instant::now();
    let handle = backing::create(size, device, false)?;
    let tier = &state.tier;
    if unused >= size {
        tier.pinned_beside_unused.fetch_add(size, Relaxed);
    }
    tier.pinning_ns
        .fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    tier.pinned.fetch_add(size, Relaxed);
    lock(&tier.host_bytes).insert(handle, size);
    Ok(handle)
}

/// The most host memory on `device` kept unused (spares, and kept blocks'
/// in host memory), whatever its sizes: twice the most the device's
/// blocks ever had in host memory at once. Kept by size alone, a job
/// whose shapes change from step to step would keep every size it ever
/// spilled pinned.
pub(super) fn host_cap(state: &State, device: Device) -> u64 {
    2 * state.ledger.device(device).peak_spilled.load(Relaxed)
}

/// Host memory on a device that no live block holds (spares, kept
/// blocks' in host memory): how many handles of each size, and the bytes
/// of all. The bounds on what is kept, and the pinning count, read it.
#[derive(Default)]
struct Unused {
    by_size: HashMap<u64, usize>,
    bytes: u64,
}

impl Unused {
    fn add(&mut self, size: u64, bytes: u64) {
        *self.by_size.entry(size).or_default() += 1;
        self.bytes += bytes;
    }

    /// With `device`'s spares in `spares` (the tier's list, locked).
    fn spares(mut self, spares: &[(u64, Device, u64)], device: Device) -> Self {
        for &(bytes, _, _) in spares.iter().filter(|s| s.1 == device) {
            self.add(bytes, bytes);
        }
        self
    }

    /// With `device`'s kept blocks in host memory in `list` (the kept
    /// blocks, locked; `sizes` the host handles' bytes, locked after).
    fn kept(mut self, list: &[Kept], sizes: &HashMap<u64, u64>, device: Device) -> Self {
        for kept in list.iter().filter(|k| super::kept::in_host_on(k, device)) {
            self.add(kept.backing.size, bytes_of(sizes, &kept.backing));
        }
        self
    }

    fn of_size(&self, size: u64) -> usize {
        self.by_size.get(&size).copied().unwrap_or(0)
    }
}

/// Kept blocks on `device` in host memory. Takes the kept blocks' locks,
/// so never while the spares' is held (the kept blocks take it after
/// theirs).
fn unused_kept(state: &State, device: Device) -> Unused {
    let list = lock(&state.tier.kept);
    let sizes = lock(&state.tier.host_bytes);
    Unused::default().kept(&list, &sizes, device)
}

/// Bytes of host memory on `device` that no live block holds, whatever
/// their sizes.
fn unused_host_bytes(state: &State, device: Device) -> u64 {
    let kept = unused_kept(state, device);
    kept.spares(&lock(&state.tier.spare_host), device).bytes
}

/// A spare that serves `size`.
fn spare(state: &State, size: u64, device: Device) -> Option<u64> {
    let mut spares = lock(&state.tier.spare_host);
    let index = spares
        .iter()
        .position(|&(bytes, of, _)| of == device && serves(bytes, size))?;
    Some(spares.swap_remove(index).2)
}

/// The host memory of a kept block in host memory (its free reached)
/// whose host memory serves `size`; the kept block is given up.
fn from_kept(state: &State, size: u64, device: Device) -> Option<u64> {
    let kept = {
        // In the order kept blocks take these locks.
        let mut list = lock(&state.tier.kept);
        let sizes = lock(&state.tier.host_bytes);
        let bytes = |k: &Kept| bytes_of(&sizes, &k.backing);
        let index = list.iter().position(|k| {
            super::kept::in_host_on(k, device) && serves(bytes(k), size) && super::kept::settled(k)
        })?;
        list.remove(index)
    };
    let backing = kept.backing;
    backing::unmap_block(kept.ptr as CUdeviceptr, backing.size, !kept.empty, true);
    super::uses::forget(state, &backing);
    super::kept::give_back_event(state, kept.event, kept.runtime_event);
    Some(backing.in_host)
}

/// The bytes of `backing`'s host memory, by `sizes` (the tier's record of
/// each host handle), which may be more than the block's.
pub(super) fn bytes_of(sizes: &HashMap<u64, u64>, backing: &Backing) -> u64 {
    sizes.get(&backing.in_host).copied().unwrap_or(backing.size)
}

/// Takes out of `list` the oldest blocks in host memory on `device` whose
/// frees are reached, of each size of which more lie unused (these and the
/// spares) than the tier's blocks of that size ever had on the host at
/// once: what the job may need again, and no more. Whatever their sizes,
/// the unused host memory stays within [`host_cap`].
pub(super) fn over_host_bound(state: &State, list: &mut Vec<Kept>, device: Device) -> Vec<Kept> {
    let in_host = |k: &Kept| super::kept::in_host_on(k, device);
    let sizes = lock(&state.tier.host_bytes);
    let bytes = |k: &Kept| bytes_of(&sizes, &k.backing);
    let mut unused = Unused::default()
        .kept(list, &sizes, device)
        .spares(&lock(&state.tier.spare_host), device);
    let cap = host_cap(state, device);
    list.extract_if(.., |kept| {
        let size = kept.backing.size;
        // The counts first: asking CUDA whether each kept block's free was
        // reached, on every free, cost the job more than the moves did.
        let over = in_host(kept)
            && (unused.of_size(size) > state.tier.most_in_host_of(device, size)
                || unused.bytes > cap)
            && super::kept::settled(kept);
        if over {
            // Counted above, as a kept block in host memory of this size.
            *unused.by_size.entry(size).or_default() -= 1;
            unused.bytes -= bytes(kept);
        }
        over
    })
    .collect()
}

/// Host memory a block held, unmapped everywhere now: kept as a spare
/// while fewer of its size lie unused (spares, kept blocks' in host memory)
/// than the tier's blocks of that size ever had on the host at once, and
/// the unused host memory stays within [`host_cap`]; else released. Only
/// memory of a block's own size serves it, so a bound on the unused bytes
/// of all sizes together let a step whose blocks going out were of other
/// sizes than the last's pin theirs anew while the others' lay unused.
pub fn give(state: &State, device: Device, handle: u64) {
    let bytes = lock(&state.tier.host_bytes).get(&handle).copied();
    if let Some(bytes) = bytes {
        let most = state.tier.most_in_host_of(device, bytes);
        let kept = unused_kept(state, device);
        let cap = host_cap(state, device);
        // The spares counted and added under one lock, so that two frees at
        // once cannot both keep one past the bounds.
        let mut spares = lock(&state.tier.spare_host);
        let unused = kept.spares(&spares, device);
        if unused.of_size(bytes) < most && unused.bytes + bytes <= cap {
            spares.push((bytes, device, handle));
            return;
        }
    }
    lock(&state.tier.host_bytes).remove(&handle);
    if !state.tier.blocks.is_empty() {
        state.tier.unpinned.fetch_add(bytes.unwrap_or(0), Relaxed);
    }
    backing::release(handle);
}

/// Releases every spare: once the job has freed all its tier blocks, it
/// may not spill again, and its host memory goes back to the machine.
pub fn release_all(state: &State) {
    let spares = std::mem::take(&mut *lock(&state.tier.spare_host));
    let mut sizes = lock(&state.tier.host_bytes);
    for (_, _, handle) in spares {
        sizes.remove(&handle);
        backing::release(handle);
    }
}
