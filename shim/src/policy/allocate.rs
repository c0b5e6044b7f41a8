//! The allocation core: reserve device bytes against the quota (atomic, no
//! lock), call CUDA with no lock held, then record the block and the event;
//! a failure of the real call gives the reservation back. Over the quota:
//! a split or spilled block, or a refusal.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use cudart_sys::*;
use vramshare_common::event::{Api, Op, Placement};

use crate::config::{human_bytes, Device, Priority, Spill};
use crate::cuda::backend::Backend;
use crate::state::ledger::Block;
use crate::state::{config, state, State};

use super::moves::wait_for_room;
use super::quota::device_quota;
use super::stream_pools;
use super::tier;
use super::tier::kept::Serve;

/// How the real allocation is made and its result handed to the caller.
pub(super) struct Request<D, H> {
    pub(super) api: Api,
    pub(super) size: u64,
    /// For a stream-ordered allocation: the pool asked for (null: the
    /// device's current one).
    pub(super) pool: Option<*mut c_void>,
    /// For a stream-ordered allocation: the stream it is made on.
    pub(super) stream: Option<usize>,
    /// Makes the allocation on the device; returns (rc, pointer, bytes taken).
    pub(super) on_device: D,
    /// Writes a spilled block's pointer (and pitch) where the caller wants it.
    pub(super) on_host: H,
    /// Flags for `cudaMallocManaged` when the block is spilled.
    pub(super) managed_flags: c_uint,
    /// Spill even with spill `off` (the caller asked for managed memory).
    pub(super) always_spill: bool,
}

pub(super) fn allocate<D, H>(request: Request<D, H>) -> cudaError_t
where
    D: FnOnce() -> (cudaError_t, *mut c_void, u64),
    H: FnOnce(*mut c_void),
{
    let Request {
        api,
        size,
        pool,
        stream,
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
    let tier_limit = tier::limit(state, device, quota);
    // A process that sees several GPUs may reach a block from another one
    // (peer access, NCCL), which the tier's blocks do not allow: there,
    // blocks stay where they are made.
    let one_device = || {
        state
            .device_count()
            .map_or_else(|| backend.device_count(), Ok)
            == Ok(1)
    };
    let tiered = if movable(state, api) {
        None
    } else {
        // A stream-ordered allocation being captured belongs to the graph,
        // made and freed at each replay: CUDA's pool serves it.
        // One from a pool the job set current stays CUDA's too.
        let ordered = stream.is_some();
        let captured = ordered && state.access.graphs.capturing_any();
        tier::tier_size(api, size as usize, tier_limit).filter(|_| {
            !captured
                && one_device()
                && (!ordered || stream_pools::current_is_default(backend, device))
        })
    };
    let size = tiered.unwrap_or(size);
    let kept_stream = stream.filter(|_| tiered.is_some());
    // Where groups are made, a stream-ordered allocation of the tier's
    // sizes takes its place in the group being filled, or begins a group:
    // a block of the group's bytes.
    let grouping = kept_stream
        .and_then(|stream| tier::grouped::begin(state, api, size, stream, tier_limit.unwrap_or(0)));
    if let Some(start) = grouping
        .as_ref()
        .and_then(|grouping| tier::grouped::place(state, grouping, size))
    {
        on_host(start as *mut c_void);
        return cudaSuccess;
    }
    let size = (grouping.as_ref())
        .and_then(|grouping| grouping.begins.as_ref())
        .map_or(size, |planned| planned.bytes);
    // Whatever hands the allocation out (not CUDA's own call, which
    // allocates the size asked) hands out the block the group is made in.
    let on_host = move |ptr: *mut c_void| {
        if let Some(grouping) = grouping {
            tier::grouped::handed(state, grouping, ptr as usize);
        }
        on_host(ptr);
    };
    // A tier block of this size freed in stream order, kept on the device:
    // its bytes count there already.
    if let Some(stream) = kept_stream {
        if let Some(ptr) = tier::kept::reuse(state, api, device, size, stream, Serve::OnDevice) {
            on_host(ptr);
            return cudaSuccess;
        }
    }
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
    // So do the tier's kept blocks, whatever the allocation.
    if !fits {
        fits = tier::kept::room_for(state, device, size, limit, true);
    }
    // And the tier's blocks that the mover thread is moving out: their
    // room is coming, and a block made in host memory would be read in
    // place or moved in again.
    if !fits && tiered.is_some() {
        fits = tier::mover::reserve_as_moves_land(state, device, size, limit, MOVER_WAITS);
    }
    // Then, beside the job's kernels, room made for it as its first use
    // would make it, so that it is not made in host memory only to be
    // copied onto the device, bytes and all, by that use. (A kept block in
    // host memory is then not handed out for it: its host memory goes to
    // a block that moves out.)
    let mut made_room = false;
    if !fits && tiered.is_some() {
        made_room = tier::room_for_new(state, api, device, size, limit);
        fits = made_room;
    }
    let count_made_room = || {
        if made_room {
            state.tier.room_at_birth.fetch_add(size, Ordering::Relaxed);
        }
    };
    if !fits && config().priority == Priority::High {
        fits = wait_for_room(state, device, size, limit);
    }
    if fits && movable(state, api) {
        return place_movable(state, api, device, size, on_host);
    }
    // The tier's blocks: on the device if they fit, else in host memory,
    // whence they move onto it as kernels need them. A kept block serves
    // first: its range and host memory are made already.
    if let Some(stream) = kept_stream {
        let serve = if fits {
            Serve::IntoRoom
        } else {
            Serve::Anywhere
        };
        if let Some(ptr) = tier::kept::reuse(state, api, device, size, stream, serve) {
            count_made_room();
            on_host(ptr);
            return cudaSuccess;
        }
    }
    if let Some(ptr) = tiered.and_then(|_| tier::place(state, api, device, size, fits)) {
        count_made_room();
        on_host(ptr);
        return cudaSuccess;
    }
    // A stream-ordered allocation being captured takes graph memory, not
    // the current pool's: it counts at its size alone.
    let pool = pool.filter(|_| !state.access.graphs.capturing_any());
    // CUDA's pool may grow by a chunk for it: room for that first (its
    // ticket), and where there is none for a growth that must come, the
    // allocation goes where one over the quota goes. With no quota and no
    // sharing pool's budget, nothing needs the room.
    let bounded = quota.is_some() || super::moves::pool_room(state, device) != u64::MAX;
    let mut ticketed = false;
    if pool.is_some() && fits && bounded {
        ticketed = super::pool_room::take_ticket(state, api, device, size, limit);
        if !ticketed {
            state.ledger.unreserve(device, size);
            fits = false;
        }
    }
    if fits {
        if let Some(pool) = pool {
            stream_pools::allocating(state, backend, pool, device, size);
        }
        let (rc, ptr, taken) = on_device();
        if rc != cudaSuccess || ptr.is_null() {
            // The pool's live bytes first: a recount between the two would
            // otherwise take the pool's reserve for the refused bytes.
            if let Some(pool) = pool {
                stream_pools::not_allocated(state, pool, size);
            }
            state.ledger.unreserve(device, size);
            if ticketed {
                super::pool_room::ticket_back(state, device, limit);
            }
            if rc != cudaSuccess {
                record_rejection(state, api, device, size, Placement::Device, rc);
            }
            return rc;
        }
        // A pitched allocation can take a little more or less than estimated
        // (and one the tier could not place, its own size, not the tier's).
        if let Some(pool) = pool.filter(|_| taken != size) {
            stream_pools::allocated_instead(state, pool, size, taken);
        }
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
            tiered: false,
        };
        record_allocation(state, ptr, block);
        if let Some(pool) = pool {
            stream_pools::recount_after_allocation(state, backend, pool, device, quota, ticketed);
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

/// How many moves ending on the mover thread an allocation that finds no
/// room waits for at most (the job's other threads may keep handing moves
/// over): as many as four of its batches hold, each move ending as it
/// lands.
const MOVER_WAITS: usize = 4 * tier::mover::BATCH;

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
fn split_head(state: &State, device: Device, size: u64, quota: u64) -> u64 {
    let used = state
        .ledger
        .device(device)
        .device_bytes
        .load(Ordering::Acquire);
    let room = split_room(quota, used);
    if room > 0 && room < size && state.ledger.try_reserve(device, room, quota) {
        room
    } else {
        0
    }
}

/// The room under `quota` with `used` bytes taken, less the headroom left
/// to later allocations, in whole large pages.
fn split_room(quota: u64, used: u64) -> u64 {
    quota
        .saturating_sub(used)
        .saturating_sub(quota / SPLIT_HEADROOM_DIVISOR)
        / SPLIT_GRAIN
        * SPLIT_GRAIN
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
    device: Device,
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
    let placed = backend.move_to_device(ptr, size as usize, device);
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
            tiered: false,
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
    device: Device,
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
    let advised = backend.place_split(ptr, size as usize, device_part as usize, device);
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
        tiered: false,
    };
    record_allocation(state, ptr, block);
    on_host(ptr);
    cudaSuccess
}

/// Counts and traces an allocation the caller does not get; returns `rc`.
pub(super) fn record_rejection(
    state: &State,
    api: Api,
    device: Device,
    size: u64,
    placement: Placement,
    rc: cudaError_t,
) -> cudaError_t {
    state
        .ledger
        .device(device)
        .rejections
        .fetch_add(1, Ordering::Relaxed);
    state.record(
        Op::Reject,
        api,
        device.number() as i32,
        0,
        size,
        placement,
        rc,
    );
    rc
}

/// Records a block the runtime handed out, and its event.
pub(super) fn record_allocation(state: &State, ptr: *mut c_void, block: Block) {
    let stale = state.ledger.insert(ptr as usize, block);
    // Where uses are recorded, a block is known in the next step's record
    // by when it was handed out.
    if tier::ahead::recording(state) {
        state.access.replay.handed_out(ptr as usize);
    }
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
                block.device.number() as i32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_block_keeps_whole_large_pages_and_leaves_a_quarter() {
        const MIB: u64 = 1 << 20;
        // 1 GiB quota, 100 MiB used: 924 MiB of room, less 256 MiB of
        // headroom, is 668 MiB, in 2 MiB pages.
        assert_eq!(split_room(1024 * MIB, 100 * MIB), 668 * MIB);
        assert_eq!(split_room(1024 * MIB, 101 * MIB), 666 * MIB, "rounded down");
        assert_eq!(
            split_room(1024 * MIB, 800 * MIB),
            0,
            "within the headroom: nothing"
        );
        assert_eq!(
            split_room(1024 * MIB, 2048 * MIB),
            0,
            "over the quota: nothing"
        );
        assert_eq!(split_room(0, 0), 0);
    }
}
