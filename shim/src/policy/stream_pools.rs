//! Stream-ordered pools (`cudaMallocAsync`, `cuMemAllocAsync` and their
//! kin) keep the memory of freed blocks reserved for later allocations.
//! Those bytes are the device's for as long as the pool holds them, so they
//! count against the quota like any other.
//!
//! The shim counts each pooled allocation at its size, as any allocation;
//! on top of that, a pool's *slack* — its reserve as CUDA reports it, less
//! the bytes of the shim's blocks live in it — is added to the device's
//! bytes after every allocation from and free to the pool. A block freed in
//! stream order stays counted until that recount takes its bytes into the
//! slack (CUDA's own count of used bytes would keep it until the stream
//! reaches the free). Over the quota, the pool is first trimmed to what it
//! uses (`cudaMemPoolTrimTo`); what a trim cannot give back (a chunk a live
//! allocation sits in) would count even so: so room for the chunk CUDA may
//! add is held beforehand ([`pool_room::take_ticket`]).

use crate::config::Device;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;

use cudart_sys::*;

use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::{Counted, State};

use super::pool_room;
use vramshare_common::trace_json::PoolOverJson;

/// `cudaMemPoolAttrReservedMemCurrent` (the driver's
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` has the same value).
const RESERVED_MEM_CURRENT: c_int = 5;

/// The most rises of a pool's reserve not fitting under the quota that the
/// trace records.
const OVER_RECORDED: usize = 16;

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

/// The pool's reserve, as CUDA reports it. (Not the bytes CUDA counts used
/// in it: a block freed in stream order counts there until its stream
/// reaches the free, by when the shim has let go of it.)
fn reading(backend: Backend, pool: usize) -> Option<u64> {
    attribute(backend, pool, RESERVED_MEM_CURRENT)
}

/// What a pool's recount follows: an allocation from it, a free to it of
/// a block whose bytes the ledger still holds, a trim after a recount of
/// a free that did not fit (the bytes it still holds for the free), or
/// none of these.
#[derive(Clone, Copy)]
enum After {
    Allocation { ticketed: bool },
    Free { held: u64 },
    Trim { held: u64 },
    Nothing,
}

/// Reads the pool's slack and moves the device's count by its change. A
/// free's rise takes the bytes the ledger held for the freed block first,
/// then any rise the room held for the pools' growths
/// ([`pool_room::take_ticket`]); the rest that does not fit under `quota`
/// is not counted, and what did not fit is returned, with the freed
/// block's bytes still held for the trim's recount. The reading and the
/// counting are done under one lock, so that two threads never count their
/// readings out of order; the pool queries under it never call back into
/// the shim or allocate.
fn count(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    after: After,
) -> Result<(), (PoolOverJson, u64)> {
    let mut counted = crate::state::lock(&state.pool_slack);
    let at_allocation = matches!(after, After::Allocation { .. });
    let freed = match after {
        After::Free { held } | After::Trim { held } => held,
        _ => 0,
    };
    let (before, reserved_before, live) = counted
        .get(&pool)
        .map_or((0, 0, 0), |c| (c.slack, c.reserved, c.live));
    // The freed block leaves the pool's live bytes here, under the lock of
    // the reading that counts its bytes as the pool's.
    let live = match after {
        After::Free { held } => live.saturating_sub(held),
        _ => live,
    };
    let Some(reserved) = reading(backend, pool) else {
        // No reading: the freed block's bytes go, as they would uncounted.
        state.ledger.unreserve(device, freed);
        if let Some(c) = counted.get_mut(&pool) {
            c.live = live;
        }
        return Ok(());
    };
    // What the pool reserves beyond the blocks the shim counts live in it:
    // unused reserve, and blocks freed in stream order whose frees the
    // stream has yet to reach (CUDA counts those as used until then).
    let slack = reserved.saturating_sub(live);
    // A free's bytes pass from the allocation's count to the slack's: only
    // new reserve at an allocation is a growth, for the room held.
    let grown = if at_allocation {
        let new_reserve = reserved.saturating_sub(reserved_before);
        slack.saturating_sub(before).min(new_reserve)
    } else {
        0
    };
    let largest_before = pool_room::learn_growth(grown);
    if grown > 0 {
        let mut growths = crate::state::lock(&state.pool_growths);
        growths.growths += 1;
        growths.largest_growth = growths.largest_growth.max(grown);
    }
    // The freed block's bytes, counted still, cover the rise they make.
    let rise = slack.saturating_sub(before);
    let covered = rise.min(freed);
    state.ledger.unreserve(device, freed - covered);
    if slack > before {
        let grow = rise - covered;
        let held = pool_room::take_held(state, device, grow);
        let more = grow - held;
        match quota {
            _ if more == 0 => {}
            Some(quota) if !state.ledger.try_reserve(device, more, quota) => {
                // As before the reading: the room held back, and the freed
                // block's bytes still held, for the trim's recount.
                pool_room::put_back(state, device, held);
                if let Some(c) = counted.get_mut(&pool) {
                    c.live = live;
                }
                let in_use = state.ledger.device(device).device_bytes.load(Relaxed);
                let short = PoolOverJson {
                    t_ns: vramshare_common::process::monotonic_ns(),
                    device: device.number(),
                    at_allocation,
                    slack_rise: grow,
                    new_reserve: grown,
                    held,
                    free: quota.saturating_sub(in_use),
                    largest_before,
                    over: 0,
                };
                return Err((short, covered));
            }
            Some(_) => {}
            None => state.ledger.reserve(device, more),
        }
    } else {
        state.ledger.unreserve(device, before - slack);
    }
    counted.insert(
        pool,
        Counted {
            device,
            backend,
            slack,
            reserved,
            live,
        },
    );
    Ok(())
}

/// Before `size` bytes are asked of `pool` on `device` (counted at their
/// size already): they count among its live bytes from now, so that no
/// recount takes them for unused reserve once CUDA has handed them out.
pub fn allocating(state: &State, backend: Backend, pool: usize, device: Device, size: u64) {
    let mut counted = crate::state::lock(&state.pool_slack);
    let entry = counted.entry(pool).or_insert(Counted {
        device,
        backend,
        slack: 0,
        reserved: 0,
        live: 0,
    });
    entry.live = entry.live.saturating_add(size);
}

/// CUDA refused the `size` bytes [`allocating`] counted live in `pool`.
pub fn not_allocated(state: &State, pool: usize, size: u64) {
    if let Some(c) = crate::state::lock(&state.pool_slack).get_mut(&pool) {
        c.live = c.live.saturating_sub(size);
    }
}

/// The allocation [`allocating`] counted as `counted` bytes live in `pool`
/// took `taken`: corrected in one hold of the lock, so that a recount
/// never reads the pool without it.
pub fn allocated_instead(state: &State, pool: usize, counted: u64, taken: u64) {
    if let Some(c) = crate::state::lock(&state.pool_slack).get_mut(&pool) {
        c.live = c.live.saturating_sub(counted).saturating_add(taken);
    }
}

/// Says once that a pool's reserve was counted over the quota: the device
/// then holds more than its quota until the allocations in it are freed.
fn over_quota_once(device: Device, over: u64) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Relaxed) {
        warn!(
            "device {device} holds {} over its quota in CUDA's stream-ordered pool (a reserve that no trim could give back while allocations live in it); counted until they are freed",
            crate::config::human_bytes(over)
        );
    }
}

/// After a free to `pool` of a block whose `held` device bytes the ledger
/// still counts ([`crate::state::ledger::Ledger::take`]): recounts its
/// slack, the held bytes passing to it under the lock of its reading, so
/// that no other allocation takes their room in between. If the slack's
/// growth would take the device over `quota`, the pool is trimmed first
/// (its unused reserve given back to the device) and what remains is
/// counted.
pub fn recount_after_free(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    held: u64,
) {
    settle(state, backend, pool, device, quota, After::Free { held });
}

/// [`recount_after_free`]'s count after an allocation from `pool`: its
/// growth takes the room held for the device's pools under the same lock
/// as its reading, so that no other allocation takes that room in between;
/// then its ticket, if it took one ([`pool_room::take_ticket`]), is handed back.
pub fn recount_after_allocation(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    ticketed: bool,
) {
    settle(
        state,
        backend,
        pool,
        device,
        quota,
        After::Allocation { ticketed },
    );
}

/// Counts the pool's slack under `quota`; where it does not fit, trims the
/// pool and counts what remains.
fn settle(
    state: &State,
    backend: Backend,
    pool: usize,
    device: Device,
    quota: Option<u64>,
    after: After,
) {
    if let Err((mut short, held)) = count(state, backend, pool, device, quota, after) {
        // The growth was counted and learnt already: the recount only
        // counts what the trim left, with the freed block's bytes held.
        let retry = match after {
            After::Free { .. } | After::Trim { .. } => After::Trim { held },
            After::Allocation { .. } | After::Nothing => After::Nothing,
        };
        trim_and_recount(state, backend, pool, device, retry);
        if let Some(quota) = quota {
            let used = state.ledger.device(device).device_bytes.load(Relaxed);
            if used > quota {
                over_quota_once(device, used - quota);
                short.over = used - quota;
            }
        }
        let mut growths = crate::state::lock(&state.pool_growths);
        if growths.over_quota.len() < OVER_RECORDED {
            growths.over_quota.push(short);
        }
    }
    // The room held for growth goes back once the device has room enough.
    let limit = quota.unwrap_or(u64::MAX);
    if let After::Allocation { ticketed: true } = after {
        pool_room::ticket_back(state, device, limit);
    } else {
        pool_room::settle_held(state, device, limit);
    }
}

/// Before anything on `device` spills: trims every pool whose slack counts
/// there, and gives back the room held for their growth. Returns whether
/// there was any of either.
pub fn trim_device(state: &State, device: Device) -> bool {
    let holding: Vec<(usize, Backend)> = crate::state::lock(&state.pool_slack)
        .iter()
        .filter(|(_, c)| c.device == device && c.slack > 0)
        .map(|(pool, c)| (*pool, c.backend))
        .collect();
    for &(pool, backend) in &holding {
        trim_and_recount(state, backend, pool, device, After::Nothing);
    }
    // The room held for the pools to grow into goes to the allocation at
    // hand first.
    pool_room::give_back_headroom(state, device) || !holding.is_empty()
}

/// Gives the pool's unused reserve back to the device, and recounts it.
fn trim_and_recount(state: &State, backend: Backend, pool: usize, device: Device, after: After) {
    trim(backend, pool);
    // With no quota, everything counts: nothing is left over.
    let _ = count(state, backend, pool, device, None, after);
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
