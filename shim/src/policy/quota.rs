//! The quota of each device: resolved on first use (a share against the
//! device's total), read at every allocation, and what `cudaMemGetInfo`
//! answers under it.

use std::sync::atomic::Ordering;

use cudart_sys::*;
use vramshare_common::registry::NO_QUOTA;

use crate::config::{human_bytes, Device, Limit};
use crate::cuda::backend::{self, Backend};
use crate::state::{config, state, State, QUOTA_RESOLVED, QUOTA_UNRESOLVED};

/// The device's quota in bytes, `None` for no limit. A percentage is resolved
/// against the device's total on first use (asked through `backend`);
/// `device` must be current.
pub fn device_quota(state: &State, device: Device, backend: Backend) -> Option<u64> {
    if state.cached_quota(device) == QUOTA_UNRESOLVED && !resolve_quota(state, device, backend) {
        return None;
    }
    let _ = state.repair_lost_pages();
    // The registry slot's value: this process's own, or one that
    // `vramshare quota set` wrote since.
    let quota = state.ledger.device(device).quota.load(Ordering::Acquire);
    (quota != NO_QUOTA).then_some(quota)
}

/// A limit in bytes: a percentage is of the device's total (asked through
/// `backend`; `None` if it cannot be).
fn limit_bytes(limit: Limit, device: Device, backend: Backend) -> Option<u64> {
    match limit {
        Limit::Bytes(bytes) => Some(bytes),
        Limit::Percent(share) => match backend.mem_get_info() {
            Ok((_, total)) => {
                let bytes = (total as f64 * share / 100.0) as u64;
                info!(
                    "device {device}: {share}% of {} = {}",
                    human_bytes(total as u64),
                    human_bytes(bytes)
                );
                Some(bytes)
            }
            Err(rc) => {
                warn!("cannot read device {device}'s memory size (CUDA error {rc}); its {share}% limit applies once it can");
                None
            }
        },
    }
}

/// First use of `device`: resolves the process's own quota for it (a
/// percentage against the device's total) into the registry slot, unless
/// `vramshare quota set` has already put one there. False if it cannot be
/// resolved yet.
fn resolve_quota(state: &State, device: Device, backend: Backend) -> bool {
    // Learn the runtime's version now, with the runtime surely up, for the
    // advise calls and the trace.
    if backend == Backend::Runtime {
        backend::runtime_major();
    }
    state.learn_device_count(|| backend.device_count().ok(), Backend::pci_address);
    let mut quota = match config().quota.for_device(device.number()) {
        None => NO_QUOTA,
        Some(limit) => match limit_bytes(limit, device, backend) {
            Some(bytes) => bytes.min(NO_QUOTA - 1),
            None => return false,
        },
    };
    // Meant for a pool that could not take it: the pool's budget then
    // holds it alone, as a quota of its own.
    if let (None, Some(_), Some(limit)) = (
        state.pool,
        &config().pool,
        config().pool_quota.for_device(device.number()),
    ) {
        match limit_bytes(limit, device, backend) {
            Some(bytes) => quota = quota.min(bytes.min(NO_QUOTA - 1)),
            None => return false,
        }
    }
    if let (Some((_, pool)), Some(limit)) =
        (state.pool, config().pool_quota.for_device(device.number()))
    {
        if let Some(offered) = limit_bytes(limit, device, backend) {
            let running = pool.offer_budget(device, offered.min(NO_QUOTA - 1));
            if running != offered {
                let name = pool.name();
                notice!(
                    "pool {name} runs with a budget of {} on device {device}; VRAMSHARE_POOL_QUOTA asks {}, and the running budget applies (vramshare quota set --pool {name} changes it)",
                    human_bytes(running),
                    human_bytes(offered)
                );
            }
        }
    }
    let slot = &state.ledger.device(device).quota;
    let _ = slot.compare_exchange(NO_QUOTA, quota, Ordering::AcqRel, Ordering::Acquire);
    state.applied_quota[device.index()].store(slot.load(Ordering::Acquire), Ordering::Release);
    state.cache_quota(device, QUOTA_RESOLVED);
    true
}

/// `cudaMemGetInfo` and `cuMemGetInfo_v2` as the quota sees it: total =
/// min(quota, physical), free = min(quota - in use, physical free), never
/// below zero.
///
/// # Safety
/// The pointers are the caller's, as CUDA would receive them.
pub unsafe fn mem_get_info(
    backend: Backend,
    free: *mut usize,
    total: *mut usize,
    real_info: impl FnOnce(*mut usize, *mut usize) -> cudaError_t,
) -> cudaError_t {
    let rc = real_info(free, total);
    if rc != cudaSuccess || free.is_null() || total.is_null() {
        return rc;
    }
    let state = state();
    let Ok(device) = backend.current_device() else {
        return rc;
    };
    // SAFETY: the caller's pointers, checked not null above.
    let (mut shown_free, mut shown_total) = unsafe { (*free, *total) };
    if let Some(quota) = device_quota(state, device, backend) {
        let used = state
            .ledger
            .device(device)
            .device_bytes
            .load(Ordering::Acquire);
        (shown_free, shown_total) = clamp(shown_free, shown_total, quota, used);
    }
    // A pool's budget is shared: what its members have not taken.
    if let Some((pool, budget)) = state
        .pool
        .and_then(|(_, pool)| Some((pool, pool.budget(device)?)))
    {
        let used = pool.device_bytes(device);
        (shown_free, shown_total) = clamp(shown_free, shown_total, budget, used);
    }
    // SAFETY: as above.
    unsafe {
        (*free, *total) = (shown_free, shown_total);
    }
    rc
}

/// The device's (free, total) as a limit of `limit` bytes, of which `used`
/// are taken, shows it: total = min(limit, total), free = min(limit - used,
/// free), never below zero.
fn clamp(free: usize, total: usize, limit: u64, used: u64) -> (usize, usize) {
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    (
        free.min(as_usize(limit.saturating_sub(used))),
        total.min(as_usize(limit)),
    )
}

#[cfg(test)]
mod tests {
    use super::clamp;

    #[test]
    fn what_mem_get_info_shows_under_a_limit() {
        const GIB: usize = 1 << 30;
        assert_eq!(
            clamp(100 * GIB, 140 * GIB, 8 << 30, 3 << 30),
            (5 * GIB, 8 * GIB)
        );
        assert_eq!(
            clamp(2 * GIB, 140 * GIB, 8 << 30, 3 << 30),
            (2 * GIB, 8 * GIB),
            "the card's own free is less"
        );
        assert_eq!(
            clamp(100 * GIB, 140 * GIB, 8 << 30, 9 << 30),
            (0, 8 * GIB),
            "over the limit: none free"
        );
        assert_eq!(
            clamp(100 * GIB, 140 * GIB, u64::MAX - 1, 0),
            (100 * GIB, 140 * GIB),
            "a limit above the card"
        );
    }
}
