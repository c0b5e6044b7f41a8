//! Stream-ordered pools (`cudaMallocAsync`, `cuMemAllocAsync` and their
//! kin) keep the memory of freed blocks reserved for later allocations.
//! Those bytes are the device's for as long as the pool holds them, so they
//! count against the quota like any other.
//!
//! The shim counts each pooled allocation at its size, as any allocation;
//! on top of that, a pool's *slack* — what it reserves beyond its live
//! allocations, as CUDA reports it — is added to the device's bytes after
//! every allocation from and free to the pool. Over the quota, the pool is
//! first trimmed to what it uses (`cudaMemPoolTrimTo`); what a trim cannot
//! give back (a chunk a live allocation sits in) counts even so. So before
//! an allocation near the quota that the pool's reserve cannot hold, room
//! is made for the chunk CUDA will add ([`room_for_growth`]).

use crate::config::Device;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use cudart_sys::*;

use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::{Counted, State};

/// `cudaMemPoolAttrReservedMemCurrent`, `cudaMemPoolAttrUsedMemCurrent`
/// (the driver's `CU_MEMPOOL_ATTR_*` have the same values).
const RESERVED_MEM_CURRENT: c_int = 5;
const USED_MEM_CURRENT: c_int = 7;

/// The least a pool is taken to grow by at once, before a growth is seen.
const LEAST_GROWTH: u64 = 2 << 20;

/// The largest growth of a pool's slack seen at an allocation: what CUDA
/// adds to a pool's reserve when an allocation does not fit in it (a
/// chunk, less the allocation). Frees, which also raise the slack, teach
/// it nothing.
static LARGEST_GROWTH: AtomicU64 = AtomicU64::new(0);

/// Before an allocation of `size` bytes from `pool` on `device`, counted
/// already: where the pool's unused reserve is smaller than `size`, CUDA
/// grows the reserve by a chunk, which counts only once the allocation is
/// made ([`recount`]), when the quota may have no room left for it and no
/// trim can give it back while the allocation lives in it. So room for
/// the largest growth seen is reserved first under `limit`, the tier's
/// kept blocks whose frees are reached giving theirs if need be (nothing
/// spills for it). The bytes reserved, to be settled against the growth
/// by [`recount_after_allocation`]; 0 where none was needed or none could
/// be had. (The pool's unused reserve is taken as one: a reserve split
/// into pieces too small for the allocation may grow all the same.)
pub fn room_for_growth(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    size: u64,
    limit: u64,
) -> u64 {
    let growth = LARGEST_GROWTH.load(Relaxed).max(LEAST_GROWTH);
    let used = state.ledger.device(device).device_bytes.load(Relaxed);
    // Far enough under the limit and the sharing pool's budget, nothing to
    // ask CUDA.
    let room = limit
        .saturating_sub(used)
        .min(super::moves::pool_room(state, device));
    if room >= growth {
        return 0;
    }
    if slack(backend, pool).is_none_or(|slack| slack >= size) {
        return 0;
    }
    let reserved = state.ledger.try_reserve(device, growth, limit)
        || super::tier::kept::room_for(state, device, growth, limit, false);
    if reserved {
        growth
    } else {
        0
    }
}

/// The pool an allocation comes from: the one given, or the device's
/// current pool; `None` if CUDA cannot say.
pub fn resolve(backend: Backend, given: *mut c_void, device: Device) -> Option<usize> {
    if !given.is_null() {
        return Some(given as usize);
    }
    let mut pool: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes a handle we own.
    let rc = unsafe {
        match backend {
            Backend::Runtime => real::cudaDeviceGetMemPool(&mut pool, device.number() as c_int),
            Backend::Driver => real::cuDeviceGetMemPool(&mut pool, device.number() as CUdevice),
        }
    };
    check(rc)
        .ok()
        .filter(|()| !pool.is_null())
        .map(|()| pool as usize)
}

/// Whether `device`'s current pool is its default one. A pool the job made
/// and set current (`cudaDeviceSetMemPool`) may be exported to other
/// processes: what it hands out stays CUDA's, never a spill tier block.
pub fn current_is_default(backend: Backend, device: Device) -> bool {
    let current = resolve(backend, std::ptr::null_mut(), device);
    current.is_some() && current == default_pool(backend, device)
}

/// `device`'s default pool, if CUDA can say.
pub fn default_pool(backend: Backend, device: Device) -> Option<usize> {
    let mut default: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes a handle we own.
    let rc = unsafe {
        match backend {
            Backend::Runtime => {
                real::cudaDeviceGetDefaultMemPool(&mut default, device.number() as c_int)
            }
            Backend::Driver => {
                real::cuDeviceGetDefaultMemPool(&mut default, device.number() as CUdevice)
            }
        }
    };
    (rc == cudaSuccess && !default.is_null()).then_some(default as usize)
}

/// One of the pool's 64-bit attributes (its reserved and used bytes, and
/// their high-water marks), as CUDA says it.
pub fn attribute(backend: Backend, pool: usize, attribute: c_int) -> Option<u64> {
    let mut value: u64 = 0;
    let out = &mut value as *mut u64 as *mut c_void;
    // SAFETY: the attributes asked for are 64-bit integers, written to ours.
    let rc = unsafe {
        match backend {
            Backend::Runtime => {
                real::cudaMemPoolGetAttribute(pool as cudaMemPool_t, attribute, out)
            }
            Backend::Driver => real::cuMemPoolGetAttribute(pool as CUmemoryPool, attribute, out),
        }
    };
    check(rc).ok().map(|()| value)
}

/// The pool's reserve beyond its live allocations, as CUDA reports it.
fn slack(backend: Backend, pool: usize) -> Option<u64> {
    let reserved = attribute(backend, pool, RESERVED_MEM_CURRENT)?;
    let used = attribute(backend, pool, USED_MEM_CURRENT)?;
    Some(reserved.saturating_sub(used))
}

/// Reads the pool's slack and moves the device's count by its change. A
/// growth that does not fit under `quota` is not counted, and `false`
/// returned. The reading and the counting are done under one lock, so that
/// two threads never count their readings out of order; the pool queries
/// under it never call back into the shim or allocate.
fn count(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    held: Held,
) -> bool {
    let mut counted = crate::state::lock(&state.pool_slack);
    let Some(slack) = slack(backend, pool) else {
        state.ledger.unreserve(device, held.bytes);
        return true;
    };
    let before = counted.get(&pool).map_or(0, |c| c.slack);
    if slack > before {
        let grow = slack - before;
        if held.at_allocation {
            LARGEST_GROWTH.fetch_max(grow, Relaxed);
        }
        // Room held for the growth counts toward it; only the rest is asked.
        if grow > held.bytes {
            let more = grow - held.bytes;
            match quota {
                Some(quota) if !state.ledger.try_reserve(device, more, quota) => return false,
                Some(_) => {}
                None => state.ledger.reserve(device, more),
            }
        } else {
            state.ledger.unreserve(device, held.bytes - grow);
        }
    } else {
        state.ledger.unreserve(device, before - slack + held.bytes);
    }
    counted.insert(
        pool,
        Counted {
            device,
            backend,
            slack,
        },
    );
    true
}

/// After an allocation from or a free to `pool`: recounts its slack. If its
/// growth would take the device over `quota`, the pool is trimmed first (its
/// unused reserve given back to the device) and what remains is counted.
pub fn recount(state: &State, backend: Backend, pool: usize, device: Device, quota: Option<u64>) {
    settle(state, backend, pool, device, quota, Held::default());
}

/// [`recount`] after an allocation from `pool`, for which `held` bytes
/// were reserved beforehand ([`room_for_growth`]): they count toward the
/// pool's growth, under the same lock as its reading, so that no other
/// allocation takes that room in between.
pub fn recount_after_allocation(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    held: u64,
) {
    let held = Held {
        bytes: held,
        at_allocation: true,
    };
    settle(state, backend, pool, device, quota, held);
}

/// Room reserved ahead for a pool's growth, and whether the recount
/// follows an allocation (whose growth teaches [`LARGEST_GROWTH`]).
#[derive(Clone, Copy, Default)]
struct Held {
    bytes: u64,
    at_allocation: bool,
}

/// Counts the pool's slack under `quota`; where it does not fit, trims the
/// pool and counts what remains (the room held is settled either way).
fn settle(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    held: Held,
) {
    if !count(state, backend, pool, device, quota, held) {
        trim_and_recount(state, backend, pool, device, held);
    }
}

/// Before anything on `device` spills: trims every pool whose slack counts
/// there. Returns whether there was any.
pub fn trim_device(state: &State, device: Device) -> bool {
    let holding: Vec<(usize, Backend)> = crate::state::lock(&state.pool_slack)
        .iter()
        .filter(|(_, c)| c.device == device && c.slack > 0)
        .map(|(pool, c)| (*pool, c.backend))
        .collect();
    for &(pool, backend) in &holding {
        trim_and_recount(state, backend, pool, device, Held::default());
    }
    !holding.is_empty()
}

/// Gives the pool's unused reserve back to the device, and recounts it,
/// settling the room `held` for its growth.
fn trim_and_recount(state: &State, backend: Backend, pool: usize, device: Device, held: Held) {
    trim(backend, pool);
    count(state, backend, pool, device, None, held);
}

fn trim(backend: Backend, pool: usize) {
    // SAFETY: a pool handle CUDA gave.
    let rc = unsafe {
        match backend {
            Backend::Runtime => real::cudaMemPoolTrimTo(pool as cudaMemPool_t, 0),
            Backend::Driver => real::cuMemPoolTrimTo(pool as CUmemoryPool, 0),
        }
    };
    if rc != cudaSuccess {
        debug!("trimming pool {pool:#x}: CUDA error {rc}");
    }
}
