//! The decisions: whether an allocation fits the quota, where it goes when it
//! does not, what `cudaMemGetInfo` answers, and when spilled blocks come back.
//!
//! Order of work for an allocation: reserve device bytes against the quota
//! (atomic, no lock), then call CUDA with no lock held, then record the block
//! and the event. A failure of the real call gives the reservation back.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use cudart_sys::*;

use crate::config::{human_bytes, Limit, Priority, Spill, MAX_DEVICES};
use crate::hooks::{real, Api};
use crate::ledger::{Block, Released, Taken};
use crate::placement::{self, Backend};
use crate::state::{config, state, State, QUOTA_RESOLVED, QUOTA_UNRESOLVED};
use crate::stream_pools;
use vramshare_common::event::{Op, Placement};
use vramshare_common::registry::NO_QUOTA;

/// A real function the loaded runtime does not have.
pub fn missing(name: &str) -> cudaError_t {
    warn!("{name} is not available in the loaded CUDA runtime");
    cudaErrorNotSupported
}

/// The device's quota in bytes, `None` for no limit. A percentage is resolved
/// against the device's total on first use (asked through `backend`);
/// `device` must be current.
pub fn device_quota(state: &State, device: u32, backend: Backend) -> Option<u64> {
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
fn limit_bytes(limit: Limit, device: u32, backend: Backend) -> Option<u64> {
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
fn resolve_quota(state: &State, device: u32, backend: Backend) -> bool {
    // Learn the runtime's version now, with the runtime surely up, for the
    // advise calls and the trace.
    if backend == Backend::Runtime {
        placement::runtime_major(state);
    }
    state.learn_device_count(|| backend.device_count().ok());
    let mut quota = match config().quota.for_device(device) {
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
        config().pool_quota.for_device(device),
    ) {
        match limit_bytes(limit, device, backend) {
            Some(bytes) => quota = quota.min(bytes.min(NO_QUOTA - 1)),
            None => return false,
        }
    }
    if let (Some((_, pool)), Some(limit)) = (state.pool, config().pool_quota.for_device(device)) {
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
    state.applied_quota[device as usize].store(slot.load(Ordering::Acquire), Ordering::Release);
    state.cache_quota(device, QUOTA_RESOLVED);
    if state.listed() {
        crate::watcher::start();
    }
    true
}

/// How the real allocation is made and its result handed to the caller.
struct Request<D, H> {
    api: Api,
    size: u64,
    /// For a stream-ordered allocation: the pool asked for (null: the
    /// device's current one).
    pool: Option<*mut c_void>,
    /// Makes the allocation on the device; returns (rc, pointer, bytes taken).
    on_device: D,
    /// Writes a spilled block's pointer (and pitch) where the caller wants it.
    on_host: H,
    /// Flags for `cudaMallocManaged` when the block is spilled.
    managed_flags: c_uint,
    /// Spill even with spill `off` (the caller asked for managed memory).
    always_spill: bool,
}

fn allocate<D, H>(request: Request<D, H>) -> cudaError_t
where
    D: FnOnce() -> (cudaError_t, *mut c_void, u64),
    H: FnOnce(*mut c_void),
{
    let Request {
        api,
        size,
        pool,
        on_device,
        on_host,
        managed_flags,
        always_spill,
    } = request;
    let state = state();
    let backend = Backend::of(api);
    let device = match backend.current_device() {
        Ok(device) => device,
        Err(rc) => {
            // No usable device (no driver, say): CUDA answers for itself.
            let (real_rc, _, _) = on_device();
            debug!("{} of {size} bytes with no current device (CUDA error {rc}): passed through, rc {real_rc}", api.name());
            return real_rc;
        }
    };
    let quota = device_quota(state, device, backend);
    let usage = state.ledger.device(device);
    let pool = pool.and_then(|given| stream_pools::resolve(backend, given, device));
    // No quota of its own: only a pool's budget can refuse.
    let limit = quota.unwrap_or(u64::MAX);
    let mut fits = state.ledger.try_reserve(device, size, limit);
    // What stream-ordered pools keep unused goes back to the device before
    // anything spills.
    if !fits && stream_pools::trim_device(state, device) {
        fits = state.ledger.try_reserve(device, size, limit);
    }
    if !fits && config().priority == Priority::High {
        fits = wait_for_room(state, device, size, limit);
    }
    if fits && movable(state, api) {
        return place_movable(state, api, device, size, on_host);
    }
    if fits {
        let (rc, ptr, taken) = on_device();
        if rc != cudaSuccess || ptr.is_null() {
            state.ledger.unreserve(device, size);
            if rc != cudaSuccess {
                record_rejection(state, api, device, size, Placement::Device, rc);
            }
            return rc;
        }
        // A pitched allocation can take a little more or less than estimated.
        if taken > size {
            state.ledger.reserve(device, taken - size);
        } else if taken < size {
            state.ledger.unreserve(device, size - taken);
        }
        let managed = matches!(api, Api::cudaMallocManaged | Api::cuMemAllocManaged);
        let block = Block {
            size: taken,
            device,
            pool: pool.unwrap_or(0),
            placement: Placement::Device,
            device_part: taken,
            api,
            managed,
            moving: false,
        };
        record_allocation(state, ptr, block);
        if let Some(pool) = pool {
            stream_pools::recount(state, backend, pool, device, quota);
        }
        return rc;
    }
    let quota = quota.unwrap_or(0);
    if config().spill == Spill::Off && !always_spill {
        info!(
            "{} of {} refused: device {device} holds {} of its {} quota (VRAMSHARE_SPILL=off)",
            api.name(),
            human_bytes(size),
            human_bytes(usage.device_bytes.load(Ordering::Relaxed)),
            human_bytes(quota)
        );
        return record_rejection(
            state,
            api,
            device,
            size,
            Placement::Device,
            cudaErrorMemoryAllocation,
        );
    }
    spill(state, api, device, size, quota, managed_flags, on_host)
}

/// Granularity of a split block's device part: the GPU's large page.
const SPLIT_GRAIN: u64 = 2 << 20;

/// The share of the quota a split block leaves free, for what the job
/// allocates after it (1/4). Measured on the H200 (bench/NOTES.md, attempts
/// 2 and 4): a table's head on the device makes its gathers seven times
/// faster than from the host, but a head that took all the room sent every
/// later allocation of the job to the host and made it nine times slower.
const SPLIT_HEADROOM_DIVISOR: u64 = 4;

/// Bytes of a `size`-byte block that does not fit to keep on the device,
/// reserved here: the room under the quota less its headroom, in whole
/// large pages; 0 when there is none.
fn split_head(state: &State, device: u32, size: u64, quota: u64) -> u64 {
    let used = state
        .ledger
        .device(device)
        .device_bytes
        .load(Ordering::Acquire);
    let room = quota
        .saturating_sub(used)
        .saturating_sub(quota / SPLIT_HEADROOM_DIVISOR)
        / SPLIT_GRAIN
        * SPLIT_GRAIN;
    if room > 0 && room < size && state.ledger.try_reserve(device, room, quota) {
        room
    } else {
        0
    }
}

/// Whether this allocation is made movable: a low-priority member of a pool
/// gets managed memory on the device instead of `cudaMalloc`'s, so that it
/// can give the room back (by moving it to the host) when a high-priority
/// member needs it. Its speed on the device is the same once its pages are
/// there; the prefetch at allocation puts them there.
fn movable(state: &State, api: Api) -> bool {
    config().priority == Priority::Low
        && state.pool.is_some()
        && matches!(api, Api::cudaMalloc | Api::cuMemAlloc_v2)
}

/// A movable allocation (see [`movable`]); its device bytes are reserved.
fn place_movable(
    state: &State,
    api: Api,
    device: u32,
    size: u64,
    on_host: impl FnOnce(*mut c_void),
) -> cudaError_t {
    let backend = Backend::of(api);
    let ptr = match backend.malloc_managed(size as usize, cudaMemAttachGlobal) {
        Ok(ptr) => ptr,
        Err(rc) => {
            state.ledger.unreserve(device, size);
            return record_rejection(state, api, device, size, Placement::Device, rc);
        }
    };
    let placed = backend.move_to_device(state, ptr, size as usize, device);
    if placed != cudaSuccess {
        debug!(
            "placing a movable block of {} on device {device}: CUDA error {placed}",
            human_bytes(size)
        );
    }
    record_allocation(
        state,
        ptr,
        Block {
            size,
            device,
            pool: 0,
            placement: Placement::Device,
            device_part: size,
            api,
            managed: true,
            moving: false,
        },
    );
    on_host(ptr);
    cudaSuccess
}

/// An allocation over quota: managed memory that lives on the host and is
/// mapped for the device, except for its head when the quota still has room
/// for it ([`split_head`]).
fn spill(
    state: &State,
    api: Api,
    device: u32,
    size: u64,
    quota: u64,
    flags: c_uint,
    on_host: impl FnOnce(*mut c_void),
) -> cudaError_t {
    let usage = state.ledger.device(device);
    let reject = |rc| record_rejection(state, api, device, size, Placement::Host, rc);
    if size > host_memory_bytes() {
        warn!(
            "{} of {} is larger than this machine's memory: refused",
            api.name(),
            human_bytes(size)
        );
        return reject(cudaErrorMemoryAllocation);
    }
    // A block larger than the room left keeps its head, up to that room
    // less a quarter of the quota, on the device: a large table's first
    // rows (often its hot ones) stay on the GPU, and the smaller, busier
    // allocations that follow still find room.
    let device_part = split_head(state, device, size, quota);
    let backend = Backend::of(api);
    let ptr = match backend.malloc_managed(size as usize, flags) {
        Ok(ptr) => ptr,
        Err(rc) => {
            state.ledger.unreserve(device, device_part);
            return reject(rc);
        }
    };
    let advised = backend.place_split(state, ptr, size as usize, device_part as usize, device);
    if advised != cudaSuccess {
        warn!(
            "advising a spilled block of {} failed (CUDA error {advised}); it stays usable",
            human_bytes(size)
        );
    }
    if usage.spills.fetch_add(1, Ordering::Relaxed) == 0 {
        warn!("device {device} is at its quota: allocations now spill to host memory (the job slows down instead of failing)");
    }
    let block = Block {
        size,
        device,
        pool: 0,
        placement: Placement::Host,
        device_part,
        api,
        managed: true,
        moving: false,
    };
    record_allocation(state, ptr, block);
    on_host(ptr);
    cudaSuccess
}

/// Counts and traces an allocation the caller does not get; returns `rc`.
fn record_rejection(
    state: &State,
    api: Api,
    device: u32,
    size: u64,
    placement: Placement,
    rc: cudaError_t,
) -> cudaError_t {
    state
        .ledger
        .device(device)
        .rejections
        .fetch_add(1, Ordering::Relaxed);
    state.record(Op::Reject, api, device as i32, 0, size, placement, rc);
    rc
}

/// Records a block the runtime handed out, and its event.
fn record_allocation(state: &State, ptr: *mut c_void, block: Block) {
    let stale = state.ledger.insert(ptr as usize, block);
    state
        .ledger
        .device(block.device)
        .allocations
        .fetch_add(1, Ordering::Relaxed);
    // A split block's event says how much of it is on the device.
    let device_part = match block.placement {
        Placement::Host => block.device_part,
        _ => 0,
    };
    state.record_event(
        state
            .event(
                Op::Alloc,
                block.api,
                block.device as i32,
                ptr as usize,
                block.size,
                block.placement,
                cudaSuccess,
            )
            .with_device_part(device_part),
    );
    if let Some(stale) = stale {
        info!("{ptr:p} was handed out again while still recorded ({} from {}); the old record is dropped", human_bytes(stale.size), stale.api.name());
    }
}

fn host_memory_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return u64::MAX;
    }
    pages as u64 * page as u64
}

/// `cudaMalloc` and `cuMemAlloc_v2`.
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    unsafe { allocate_into(api, out, size, None, real_alloc, cudaMemAttachGlobal, false) }
}

/// `cudaMallocAsync`, `cudaMallocFromPoolAsync`, their driver twins and
/// `_ptsz` forms: allocations from a stream-ordered pool (`pool` null for
/// the device's current one), whose reserve counts as well ([`stream_pools`]).
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_pooled(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    pool: *mut c_void,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    unsafe {
        allocate_into(
            api,
            out,
            size,
            Some(pool),
            real_alloc,
            cudaMemAttachGlobal,
            false,
        )
    }
}

/// `cudaMallocManaged` and `cuMemAllocManaged`: the caller's own managed
/// memory counts against the quota while it fits; beyond, it is advised to
/// live on the host (spill mode or not: managed memory may live there by
/// nature).
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_managed(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    unsafe { allocate_into(api, out, size, None, real_alloc, flags, true) }
}

/// An allocation whose only output is the pointer written to `out`.
unsafe fn allocate_into(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    pool: Option<*mut c_void>,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
    managed_flags: c_uint,
    always_spill: bool,
) -> cudaError_t {
    if out.is_null() {
        return real_alloc(out);
    }
    allocate(Request {
        api,
        size: size as u64,
        pool,
        on_device: || {
            let rc = real_alloc(out);
            let ptr = if rc == cudaSuccess {
                unsafe { *out }
            } else {
                std::ptr::null_mut()
            };
            (rc, ptr, size as u64)
        },
        on_host: |ptr| unsafe { *out = ptr },
        managed_flags,
        always_spill,
    })
}

/// The pitch CUDA picks for a row of `width` bytes, for reserving before the
/// call; corrected from the real pitch after it.
const PITCH_ALIGN: usize = 512;

fn estimated_pitch(width: usize) -> Option<usize> {
    width.checked_next_multiple_of(PITCH_ALIGN)
}

/// # Safety
/// The pointers are the caller's, as CUDA would receive them.
pub unsafe fn malloc_pitch(
    api: Api,
    out: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
    real_pitch: impl Fn() -> cudaError_t,
) -> cudaError_t {
    let estimate = estimated_pitch(width).and_then(|p| Some((p, p.checked_mul(height)?)));
    let (Some((est_pitch, size)), false, false) = (estimate, out.is_null(), pitch.is_null()) else {
        return real_pitch();
    };
    allocate(Request {
        api,
        size: size as u64,
        pool: None,
        on_device: || unsafe {
            let rc = real_pitch();
            if rc == cudaSuccess {
                (rc, *out, (*pitch as u64).saturating_mul(height as u64))
            } else {
                (rc, std::ptr::null_mut(), 0)
            }
        },
        on_host: |ptr| unsafe {
            *out = ptr;
            *pitch = est_pitch;
        },
        managed_flags: cudaMemAttachGlobal,
        always_spill: false,
    })
}

/// # Safety
/// `pitched` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_3d(pitched: *mut cudaPitchedPtr, extent: cudaExtent) -> cudaError_t {
    let estimate = estimated_pitch(extent.width)
        .and_then(|p| Some((p, p.checked_mul(extent.height)?.checked_mul(extent.depth)?)));
    let (Some((est_pitch, size)), false) = (estimate, pitched.is_null()) else {
        return unsafe { real::cudaMalloc3D(pitched, extent) };
    };
    allocate(Request {
        api: Api::cudaMalloc3D,
        size: size as u64,
        pool: None,
        on_device: || unsafe {
            let rc = real::cudaMalloc3D(pitched, extent);
            if rc == cudaSuccess {
                let p = *pitched;
                (
                    rc,
                    p.ptr,
                    (p.pitch as u64).saturating_mul((extent.height * extent.depth) as u64),
                )
            } else {
                (rc, std::ptr::null_mut(), 0)
            }
        },
        on_host: |ptr| unsafe {
            *pitched = cudaPitchedPtr {
                ptr,
                pitch: est_pitch,
                xsize: extent.width,
                ysize: extent.height,
            };
        },
        managed_flags: cudaMemAttachGlobal,
        always_spill: false,
    })
}

/// `cudaFree`, `cudaFreeAsync` and the driver's `cuMemFree_v2`,
/// `cuMemFreeAsync`. Managed memory (a spilled block, also once promoted, or
/// the caller's own) is always given back with `cudaFree` or `cuMemFree_v2`,
/// which wait for the device first, as a stream-ordered free requires, and
/// which the stream-ordered frees would refuse. A pointer the shim did not
/// hand out goes to the real function, which answers for it.
///
/// # Safety
/// `ptr` is the caller's pointer, as CUDA would receive it.
pub unsafe fn free(
    api: Api,
    ptr: *mut c_void,
    real_free: impl FnOnce(*mut c_void) -> cudaError_t,
) -> cudaError_t {
    if ptr.is_null() {
        // cudaFree(0) is how programs make the context: nothing to account.
        return real_free(ptr);
    }
    let state = state();
    let block = loop {
        match state.ledger.take(ptr as usize) {
            Taken::Block(block) => break block,
            Taken::Moving => std::thread::yield_now(),
            Taken::Unknown => {
                let rc = real_free(ptr);
                state.record(Op::Free, api, -1, ptr as usize, 0, Placement::Unknown, rc);
                info!("{} of {ptr:p}, which vramshare did not hand out (or was freed already): CUDA answered {rc}", api.name());
                return rc;
            }
        }
    };
    let rc = if block.managed && !matches!(api, Api::cudaFree | Api::cuMemFree_v2) {
        Backend::of(api).free_managed(ptr)
    } else {
        real_free(ptr)
    };
    state.record(
        Op::Free,
        api,
        block.device as i32,
        ptr as usize,
        block.size,
        block.placement,
        rc,
    );
    if block.pool != 0 {
        // The pool keeps the block's bytes: they count on as its slack.
        let backend = Backend::of(api);
        let quota = device_quota(state, block.device, backend);
        stream_pools::recount(state, backend, block.pool, block.device, quota);
    }
    if block.placement == Placement::Device {
        promote(state, block.device, Backend::of(api));
    }
    rc
}

/// Brings spilled blocks back onto `device`, largest first, while they fit
/// under its quota.
pub fn promote(state: &State, device: u32, backend: Backend) {
    promote_leaving(state, device, backend, 0);
}

/// The same, leaving `keep_free` bytes of the pool's room to others (the
/// spilled bytes of its high-priority members, which come back first).
pub fn promote_leaving(state: &State, device: u32, backend: Backend, keep_free: u64) {
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
        let rc = block_backend.move_to_device(state, tail, size as usize, device);
        state.ledger.end_move(ptr);
        state.record(
            Op::Promote,
            block_backend.prefetch_api(),
            device as i32,
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
pub fn pool_room(state: &State, device: u32) -> u64 {
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
pub fn demote_to_quota(state: &State, device: u32, backend: Backend) {
    let quota = device_quota(state, device, backend).unwrap_or(u64::MAX);
    let usage = state.ledger.device(device);
    demote_while(state, device, |_| {
        let pool_over = state.pool.is_some_and(|(_, pool)| {
            pool.budget(device)
                .is_some_and(|b| pool.device_bytes(device) > b)
        });
        usage.device_bytes.load(Ordering::Acquire) > quota || pool_over
    });
}

/// For the pool's high-priority members, who want `wanted` bytes of room
/// on `device`: moves managed blocks to the host, largest first, until the
/// pool has that much room (each block's bytes leave the pool before it
/// moves, so members giving way at once stop as soon as there is room).
pub fn demote_for(state: &State, device: u32, wanted: u64) {
    demote_while(state, device, |_| pool_room(state, device) < wanted);
}

/// Demotes the device's managed blocks, largest first, while `more(freed)`.
fn demote_while(state: &State, device: u32, mut more: impl FnMut(u64) -> bool) -> u64 {
    let mut freed = 0;
    for (size, ptr) in state.ledger.demotion_candidates(device) {
        if !more(freed) {
            break;
        }
        let Some(api) = state.ledger.begin_demotion(ptr, size) else {
            continue;
        };
        let block_backend = Backend::of(api);
        let rc = block_backend.move_to_host(state, ptr as *mut c_void, size as usize, device);
        state.ledger.end_move(ptr);
        state.record(
            Op::Demote,
            block_backend.prefetch_api(),
            device as i32,
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
    freed
}

/// How long a high-priority allocation waits for the pool's other members
/// to make room before it spills.
const HIGH_PRIORITY_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A high-priority member's allocation that finds its pool full: says in
/// its registry slot that it wants `size` bytes (the others' shims look
/// every 50 ms and demote managed blocks), and takes the room if it comes
/// in time.
fn wait_for_room(state: &State, device: u32, size: u64, limit: u64) -> bool {
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
    let as_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    if let Some(quota) = device_quota(state, device, backend) {
        let used = state
            .ledger
            .device(device)
            .device_bytes
            .load(Ordering::Acquire);
        unsafe {
            *total = (*total).min(as_usize(quota));
            *free = (*free).min(as_usize(quota.saturating_sub(used)));
        }
    }
    // A pool's budget is shared: what its members have not taken.
    if let Some(budget) = state
        .pool
        .and_then(|(_, pool)| Some((pool, pool.budget(device)?)))
    {
        let (pool, budget) = budget;
        unsafe {
            *total = (*total).min(as_usize(budget));
            *free = (*free).min(as_usize(budget.saturating_sub(pool.device_bytes(device))));
        }
    }
    rc
}

/// `cuMemCreate`: physical memory made on a device counts against its quota
/// until `cuMemRelease`. Over the quota (spill `host`), the memory is made on
/// the host instead, in the device's nearest NUMA node, where the driver
/// allows it; the caller maps it and grants the device access as it would
/// have, and the GPU reaches it over the link. Where the driver refuses host
/// memory, the answer is `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// # Safety
/// The pointers are the caller's, as the driver would receive them.
pub unsafe fn mem_create(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    real_create: impl Fn(*const CUmemAllocationProp) -> CUresult,
) -> CUresult {
    let asked = if handle.is_null() || prop.is_null() {
        None
    } else {
        Some(unsafe { *prop })
    };
    let (asked, device) = match asked {
        Some(p)
            if p.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE
                && (0..MAX_DEVICES as i32).contains(&p.location.id) =>
        {
            (p, p.location.id as u32)
        }
        _ => return real_create(prop),
    };
    let state = state();
    let api = Api::cuMemCreate;
    let size = size as u64;
    let quota = device_quota(state, device, Backend::Driver);
    let fits = state
        .ledger
        .try_reserve(device, size, quota.unwrap_or(u64::MAX));
    let refuse = |why: &str| {
        info!(
            "cuMemCreate of {} refused: over device {device}'s quota{why}",
            human_bytes(size)
        );
        record_rejection(
            state,
            api,
            device,
            size,
            Placement::Device,
            CUDA_ERROR_OUT_OF_MEMORY,
        )
    };
    let (rc, placement) = if fits {
        let rc = real_create(prop);
        if rc != CUDA_SUCCESS {
            state.ledger.unreserve(device, size);
            return record_rejection(state, api, device, size, Placement::Device, rc);
        }
        (rc, Placement::Device)
    } else if config().spill == Spill::Off {
        return refuse(" (VRAMSHARE_SPILL=off)");
    } else {
        match create_on_host(device, &asked, &real_create) {
            Ok(rc) => (rc, Placement::Host),
            Err(rc) => {
                info!("cuMemCreate of {} over device {device}'s quota: the driver refused host memory (CUDA error {rc})", human_bytes(size));
                return record_rejection(
                    state,
                    api,
                    device,
                    size,
                    Placement::Host,
                    CUDA_ERROR_OUT_OF_MEMORY,
                );
            }
        }
    };
    let made = unsafe { *handle };
    state.ledger.insert_handle(
        made,
        Block {
            size,
            device,
            pool: 0,
            placement,
            // Physical memory is made whole, on the device or on the host.
            device_part: if placement == Placement::Device {
                size
            } else {
                0
            },
            api,
            managed: false,
            moving: false,
        },
    );
    let usage = state.ledger.device(device);
    usage.allocations.fetch_add(1, Ordering::Relaxed);
    if placement == Placement::Host && usage.spills.fetch_add(1, Ordering::Relaxed) == 0 {
        warn!("device {device} is at its quota: physical memory (cuMemCreate) is now made on the host (the job slows down instead of failing)");
    }
    state.record(
        Op::Alloc,
        api,
        device as i32,
        made as usize,
        size,
        placement,
        rc,
    );
    rc
}

/// Makes the physical memory asked for `device` on the host, trying in turn:
/// the NUMA node nearest the device with the caller's properties; the same
/// without the allocation flags (PyTorch and XLA ask for GPUDirect RDMA,
/// which host memory may not offer); anywhere on the host, not shareable
/// with other processes (the driver allows no handle type there).
fn create_on_host(
    device: u32,
    asked: &CUmemAllocationProp,
    real_create: &impl Fn(*const CUmemAllocationProp) -> CUresult,
) -> Result<CUresult, CUresult> {
    let mut numa: std::ffi::c_int = -1;
    // SAFETY: writes the int we own.
    let rc = unsafe {
        real::cuDeviceGetAttribute(
            &mut numa,
            CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
            device as CUdevice,
        )
    };
    let numa = if rc == CUDA_SUCCESS && numa >= 0 {
        numa
    } else {
        0
    };
    let on_numa = CUmemAllocationProp {
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_HOST_NUMA,
            id: numa,
        },
        ..*asked
    };
    let plain_numa = CUmemAllocationProp {
        allocFlags: [0; 8],
        ..on_numa
    };
    let anywhere = CUmemAllocationProp {
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        requestedHandleTypes: 0,
        ..plain_numa
    };
    let mut first = CUDA_SUCCESS;
    for (form, prop) in [
        ("host NUMA node", on_numa),
        ("host NUMA node, no allocation flags", plain_numa),
        ("host, no handle type or allocation flags", anywhere),
    ] {
        let rc = real_create(&prop);
        if rc == CUDA_SUCCESS {
            debug!("cuMemCreate for device {device} made on the {form}");
            return Ok(rc);
        }
        debug!("cuMemCreate on the {form}: CUDA error {rc}");
        if first == CUDA_SUCCESS {
            first = rc;
        }
    }
    Err(first)
}

/// `cuMemRelease`: the handle's bytes stop counting (and spilled blocks may
/// come back into the room), unless the memory is still mapped: the driver
/// frees it at the last `cuMemUnmap`, and so does the count.
pub fn mem_release(
    handle: CUmemGenericAllocationHandle,
    real_release: impl FnOnce() -> CUresult,
) -> CUresult {
    let state = state();
    // Taken out of the ledger first: once released, the driver may hand
    // the same handle value to another thread's cuMemCreate.
    let released = state.ledger.release_physical(handle);
    let rc = real_release();
    match released {
        Released::Freed(block) => physical_freed(state, Api::cuMemRelease, handle, block, rc),
        Released::StillMapped => {
            debug!("cuMemRelease of handle {handle}: still mapped, counted until unmapped")
        }
        Released::Unknown => state.record(
            Op::Free,
            Api::cuMemRelease,
            -1,
            handle as usize,
            0,
            Placement::Unknown,
            rc,
        ),
    }
    rc
}

/// `cuMemMap`: a mapping keeps the handle's memory alive past its release.
pub fn mem_map(
    ptr: CUdeviceptr,
    size: usize,
    handle: CUmemGenericAllocationHandle,
    real_map: impl FnOnce() -> CUresult,
) -> CUresult {
    let rc = real_map();
    if rc == CUDA_SUCCESS {
        state().ledger.map_physical(ptr as usize, size, handle);
    }
    rc
}

/// `cuMemUnmap`: released memory whose last mapping this was is freed.
pub fn mem_unmap(ptr: CUdeviceptr, size: usize, real_unmap: impl FnOnce() -> CUresult) -> CUresult {
    let rc = real_unmap();
    if rc == CUDA_SUCCESS {
        let state = state();
        for (handle, block) in state.ledger.unmap_physical(ptr as usize, size) {
            physical_freed(state, Api::cuMemUnmap, handle, block, rc);
        }
    }
    rc
}

/// Physical memory the driver has freed: recorded (the event's `ptr` is the
/// handle), and its room goes to spilled blocks.
fn physical_freed(
    state: &State,
    api: Api,
    handle: CUmemGenericAllocationHandle,
    block: Block,
    rc: CUresult,
) {
    state.record(
        Op::Free,
        api,
        block.device as i32,
        handle as usize,
        block.size,
        block.placement,
        rc,
    );
    promote(state, block.device, Backend::Driver);
}
