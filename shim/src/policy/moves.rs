//! Moving blocks between the device and the host as room changes:
//! promotions into freed room, demotions after a cut or for the pool's
//! high-priority members, and the wait a high-priority allocation makes.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use vramshare_common::event::{Op, Placement};

use crate::config::{human_bytes, Device};
use crate::cuda::backend::Backend;
use crate::state::State;

use super::quota::device_quota;

/// Brings spilled blocks back onto `device`, largest first, while they fit
/// under its quota.
pub fn promote(state: &State, device: Device, backend: Backend) {
    promote_leaving(state, device, backend, 0);
}

/// The same, leaving `keep_free` bytes of the pool's room to others (the
/// spilled bytes of its high-priority members, which come back first).
pub fn promote_leaving(state: &State, device: Device, backend: Backend, keep_free: u64) {
    let usage = state.ledger.device(device);
    if usage.spilled_bytes.load(Ordering::Acquire) == 0 {
        return;
    }
    let quota = device_quota(state, device, backend).unwrap_or(u64::MAX);
    let room = quota
        .saturating_sub(usage.device_bytes.load(Ordering::Acquire))
        .min(pool_room(state, device).saturating_sub(keep_free));
    for (size, ptr) in state.ledger.promotion_candidates(device, room) {
        if !state.ledger.try_reserve(device, size, quota) {
            continue;
        }
        // Each block moves through the API that made it; a split block
        // moves its host part.
        let Some((api, offset)) = state.ledger.begin_promotion(ptr, size) else {
            state.ledger.unreserve(device, size);
            continue;
        };
        let block_backend = Backend::of(api);
        let tail = (ptr as *mut u8).wrapping_add(offset as usize) as *mut c_void;
        let rc = block_backend.move_to_device(tail, size as usize, device);
        state.ledger.end_move(ptr);
        state.record(
            Op::Promote,
            block_backend.prefetch_api(),
            device.number() as i32,
            ptr,
            size,
            Placement::Device,
            rc,
        );
        debug!(
            "promoted {} at {ptr:#x} to device {device} (rc {rc})",
            human_bytes(size)
        );
    }
}

/// What the pool's budget has left on `device` (no pool, or no budget: no
/// limit).
pub fn pool_room(state: &State, device: Device) -> u64 {
    state
        .pool
        .and_then(|(_, pool)| {
            Some(
                pool.budget(device)?
                    .saturating_sub(pool.device_bytes(device)),
            )
        })
        .unwrap_or(u64::MAX)
}

/// After a quota cut (the process's or its pool's): moves the device's
/// managed blocks (the caller's own, or promoted ones) to the host, largest
/// first, until the process and its pool are back under their limits or
/// nothing more can move.
pub fn demote_to_quota(state: &State, device: Device, backend: Backend) {
    // The room held for pools to grow into is no block's: it goes first.
    super::pool_room::give_back_headroom(state, device);
    let quota = device_quota(state, device, backend).unwrap_or(u64::MAX);
    demote_while(state, device, |_| over_limits(state, device, quota));
}

/// Whether `device`'s bytes are over `quota` or its pool's over the pool's
/// budget: a cut yet to be made good.
pub fn over_limits(state: &State, device: Device, quota: u64) -> bool {
    let pool_over = state.pool.is_some_and(|(_, pool)| {
        pool.budget(device)
            .is_some_and(|budget| pool.device_bytes(device) > budget)
    });
    pool_over
        || state
            .ledger
            .device(device)
            .device_bytes
            .load(Ordering::Acquire)
            > quota
}

/// For the pool's high-priority members, who want `wanted` bytes of room
/// on `device`: moves managed blocks to the host, largest first, until the
/// pool has that much room (each block's bytes leave the pool before it
/// moves, so members giving way at once stop as soon as there is room).
/// What they want is asked again before each block (`wanted`): a high
/// member that has taken its room meanwhile wants nothing more, and a
/// second block would move for nothing.
pub fn demote_for(state: &State, device: Device, wanted: impl Fn() -> u64) {
    demote_while(state, device, |_| pool_room(state, device) < wanted());
}

/// Demotes the device's managed blocks, largest first, then the spill
/// tier's, while `more(freed)`.
fn demote_while(state: &State, device: Device, mut more: impl FnMut(u64) -> bool) -> u64 {
    // The spill tier's kept blocks first: giving them back moves nothing.
    let mut freed = super::tier::kept::give_back_while(state, device, false, &mut more);
    for (size, ptr) in state.ledger.demotion_candidates(device) {
        if !more(freed) {
            break;
        }
        let Some(api) = state.ledger.begin_demotion(ptr, size) else {
            continue;
        };
        let block_backend = Backend::of(api);
        let rc = block_backend.move_to_host(ptr as *mut c_void, size as usize, device);
        state.ledger.end_move(ptr);
        state.record(
            Op::Demote,
            block_backend.prefetch_api(),
            device.number() as i32,
            ptr,
            size,
            Placement::Host,
            rc,
        );
        debug!(
            "demoted {} at {ptr:#x} from device {device} (rc {rc})",
            human_bytes(size)
        );
        freed += size;
    }
    // Then the spill tier's blocks, least needed first.
    if more(freed) {
        let before = freed;
        freed += super::tier::evict_while(state, device, |moved| more(before + moved));
    }
    freed
}

/// How long a high-priority allocation waits for the pool's other members
/// to make room before it spills.
const HIGH_PRIORITY_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A high-priority member's allocation that finds its pool full: says in
/// its registry slot that it wants `size` bytes (the others' shims look
/// every 50 ms and demote managed blocks), and takes the room if it comes
/// in time.
pub(super) fn wait_for_room(state: &State, device: Device, size: u64, limit: u64) -> bool {
    let Some((_, pool)) = state.pool else {
        return false;
    };
    let wanted = &state.ledger.device(device).wanted;
    wanted.fetch_add(size, Ordering::AcqRel);
    let deadline = std::time::Instant::now() + HIGH_PRIORITY_WAIT;
    let got = loop {
        if state.ledger.try_reserve(device, size, limit) {
            break true;
        }
        if std::time::Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    wanted.fetch_sub(size, Ordering::AcqRel);
    if !got {
        info!(
            "high priority: the pool {} had no room for {} after {:?}",
            pool.name(),
            human_bytes(size),
            HIGH_PRIORITY_WAIT
        );
    }
    got
}
