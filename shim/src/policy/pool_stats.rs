//! What a device's default stream-ordered pool says it holds, with the
//! spill tier's blocks in it. PyTorch's `cudaMallocAsync` backend reads its
//! memory statistics (`torch.cuda.memory_allocated`, `memory_reserved` and
//! their peaks) from the pool's attributes, and the tier serves that
//! pool's large allocations outside it: left alone, the pool would answer
//! as if the job held only its small tensors.
//!
//! Asked about such a pool, the shim adds the tier's blocks standing for
//! its allocations: used memory gains the live ones (wherever they are),
//! reserved memory those and the kept ones on the device, as the pool
//! counts what it keeps for reuse. A high-water mark is the higher of the
//! pool's own, the sum now, and the most the sums reached when the tier
//! made a block or its live bytes reached a new high; writing 0 to it
//! resets both, as CUDA resets the pool's.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use cudart_sys::*;
use vramshare_common::event::Api;

use super::stream_pools::attribute as pool_attribute;
use crate::config::Device;
use crate::cuda::backend::Backend;
use crate::state::tier::Ordered;
use crate::state::{state, State};

/// `cudaMemPoolAttr` and `CUmemPool_attribute` alike.
const RESERVED_CURRENT: c_int = 5;
const RESERVED_HIGH: c_int = 6;
const USED_CURRENT: c_int = 7;
const USED_HIGH: c_int = 8;

/// Whether `api` allocates from a stream-ordered pool (the only tier
/// blocks that stand for a pool's allocations come from these).
fn ordered(api: Api) -> bool {
    matches!(
        api,
        Api::cudaMallocAsync
            | Api::cudaMallocAsync_ptsz
            | Api::cuMemAllocAsync
            | Api::cuMemAllocAsync_ptsz
    )
}

/// After a tier block of `size` bytes was handed out by `api` on `device`
/// (`made`: new, not a kept one given again): counted for the device's
/// default pool, whose marks it may raise.
pub fn handed_out(state: &State, api: Api, device: Device, size: u64, made: bool) {
    if !ordered(api) {
        return;
    }
    let backend = Backend::of(api);
    let counts = &state.tier.ordered[device.index()];
    if counts.pool.load(Relaxed) == 0 {
        if let Some(pool) = super::stream_pools::default_pool(backend, device) {
            counts.pool.store(pool as u64, Relaxed);
        }
    }
    let live = counts.live.fetch_add(size, Relaxed) + size;
    // The pool is asked only when the tier's part reaches a new high, or
    // new memory was made: a step that allocates what it freed, from kept
    // blocks, costs no query.
    if counts.live_high.fetch_max(live, Relaxed) >= live && !made {
        return;
    }
    raise_marks(state, backend, device, counts);
}

/// Raises the marks to what the pool and the tier's blocks hold now.
fn raise_marks(state: &State, backend: Backend, device: Device, counts: &Ordered) {
    let pool = counts.pool.load(Relaxed) as usize;
    for high in [USED_HIGH, RESERVED_HIGH] {
        let (mark, current) = mark_of(counts, high);
        if let Some(now) = held_now(state, backend, pool, device, counts, current) {
            mark.fetch_max(now, Relaxed);
        }
    }
}

/// A high-water mark's count of the tier's, and the attribute it marks.
fn mark_of(counts: &Ordered, high: c_int) -> (&AtomicU64, c_int) {
    if high == USED_HIGH {
        (&counts.used_high, USED_CURRENT)
    } else {
        (&counts.reserved_high, RESERVED_CURRENT)
    }
}

/// The tier's part of `current` (used or reserved bytes) on `device`: its
/// live blocks, and for reserved bytes also its kept ones on the device.
fn tier_part(state: &State, device: Device, counts: &Ordered, current: c_int) -> u64 {
    let live = counts.live.load(Relaxed);
    if current == USED_CURRENT {
        live
    } else {
        live + kept_bytes(state, device)
    }
}

/// What the pool and the tier's blocks hold together now, of `current`;
/// `None` if the pool cannot say.
fn held_now(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    counts: &Ordered,
    current: c_int,
) -> Option<u64> {
    let pools = pool_attribute(backend, pool, current)?;
    Some(pools + tier_part(state, device, counts, current))
}

/// After a tier block handed out by `api` on `device` was freed.
pub fn given_back(state: &State, api: Api, device: Device, size: u64) {
    if ordered(api) {
        let live = &state.tier.ordered[device.index()].live;
        let _ = live.fetch_update(Relaxed, Relaxed, |bytes| Some(bytes.saturating_sub(size)));
    }
}

/// `cudaMemPoolGetAttribute` and `cuMemPoolGetAttribute`: CUDA's answer,
/// with the tier's blocks added for a default pool they serve.
///
/// # Safety
/// The caller's arguments, as CUDA would receive them.
pub unsafe fn get_attribute(
    api: Api,
    pool: *mut c_void,
    attribute: c_int,
    value: *mut c_void,
    real_get: impl FnOnce() -> cudaError_t,
) -> cudaError_t {
    let rc = real_get();
    if rc != cudaSuccess || value.is_null() || !(RESERVED_CURRENT..=USED_HIGH).contains(&attribute)
    {
        return rc;
    }
    let state = state();
    let Some((device, counts)) = served(state, pool) else {
        return rc;
    };
    let value = value.cast::<u64>();
    // SAFETY: CUDA wrote a 64-bit integer there for these attributes.
    let pools = unsafe { value.read_unaligned() };
    let backend = Backend::of(api);
    let shown = match attribute {
        USED_CURRENT | RESERVED_CURRENT => pools + tier_part(state, device, counts, attribute),
        high => {
            // A mark is never below what is held now, as CUDA's are not.
            let (mark, current) = mark_of(counts, high);
            let now = held_now(state, backend, pool as usize, device, counts, current)
                .unwrap_or_else(|| tier_part(state, device, counts, current));
            pools.max(mark.fetch_max(now, Relaxed)).max(now)
        }
    };
    // SAFETY: as above.
    unsafe { value.write_unaligned(shown) };
    rc
}

/// `cudaMemPoolSetAttribute` and `cuMemPoolSetAttribute`: CUDA's; a reset
/// of a high-water mark also resets the tier's part of it to the sum now.
///
/// # Safety
/// The caller's arguments, as CUDA would receive them.
pub unsafe fn set_attribute(
    api: Api,
    pool: *mut c_void,
    attribute: c_int,
    value: *mut c_void,
    real_set: impl FnOnce() -> cudaError_t,
) -> cudaError_t {
    let rc = real_set();
    if rc != cudaSuccess || value.is_null() || !matches!(attribute, USED_HIGH | RESERVED_HIGH) {
        return rc;
    }
    let state = state();
    let Some((device, counts)) = served(state, pool) else {
        return rc;
    };
    let backend = Backend::of(api);
    counts.live_high.store(counts.live.load(Relaxed), Relaxed);
    let (mark, current) = mark_of(counts, attribute);
    let now = held_now(state, backend, pool as usize, device, counts, current)
        .unwrap_or_else(|| tier_part(state, device, counts, current));
    mark.store(now, Relaxed);
    rc
}

/// The device whose default pool `pool` is, if tier blocks stand for its
/// allocations, and their counts.
fn served(state: &State, pool: *mut c_void) -> Option<(Device, &Ordered)> {
    if pool.is_null() {
        return None;
    }
    state
        .tier
        .ordered
        .iter()
        .enumerate()
        .find(|(_, counts)| counts.pool.load(Relaxed) == pool as u64)
        .and_then(|(index, counts)| Some((Device::new(index as u32)?, counts)))
}

/// Bytes of kept tier blocks on `device`'s memory.
fn kept_bytes(state: &State, device: Device) -> u64 {
    super::tier::kept::on_device(state, device)
}
