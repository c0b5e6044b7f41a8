//! The spill tier: blocks that move between device and host memory at a
//! fixed address, as the job's kernels need them.
//!
//! With a quota, spill `host` and moves `on`, a `cudaMalloc` or
//! `cuMemAlloc` of at least one large page (and at most half the quota) is
//! made as virtual memory ([`backing`]): physical memory on the device
//! while it fits under the quota, in host memory when it does not. A
//! kernel can read either in place, so a use the shim does not see still
//! reads the block's current bytes; only its speed depends on where the
//! block is.
//!
//! Before a launch, library call or copy that names a block in host
//! memory, the tier brings it onto the device ([`fetch`]): room is made by
//! moving to the host the tier's blocks on the device whose next use is
//! furthest away (the access profile's prediction, from the step before),
//! its range is remapped to device memory, and its bytes cross the link on
//! a copy engine from the host memory kept at the staging half. Moves
//! happen behind the gate ([`crate::state::tier::Gate`]): the job's other
//! threads hold their work back, and the device has finished everything
//! given to it, so no kernel is queued or running while a range is
//! remapped or before its copy has landed.
//!
//! The device bytes the ledger counts never exceed the quota: a block's
//! device memory is reserved before it is made, and a block moving out
//! counts on the device until its device memory is released.

pub mod backing;
pub mod kept;
mod moves;
mod spare;

use std::ffi::c_void;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use cudart_sys::*;
use vramshare_common::event::{Api, Placement};

use crate::config::{human_bytes, Device, Moves, Spill};
use crate::cuda::backend::Backend;
use crate::state::ledger::Block;
use crate::state::tier::{Backing, Inside};
use crate::state::{config, State};

use super::allocate::record_allocation;
use super::quota::device_quota;
use backing::PAGE;
use moves::{move_out, timed, Staged};

/// The size a tier block of `size` bytes takes: whole large pages, if the
/// tier makes blocks of that size for `api` under `quota`.
pub fn tier_size(api: Api, size: usize, quota: Option<u64>) -> Option<u64> {
    let config = config();
    let quota = quota?;
    let rounded = (size as u64).checked_next_multiple_of(PAGE)?;
    // Stream-ordered allocations from the device's own pool too: their
    // frees are kept for reuse ([`kept`]), as the pool would keep them.
    let made_here = matches!(
        api,
        Api::cudaMalloc
            | Api::cuMemAlloc_v2
            | Api::cudaMallocAsync
            | Api::cudaMallocAsync_ptsz
            | Api::cuMemAllocAsync
            | Api::cuMemAllocAsync_ptsz
    );
    (config.moves == Moves::On
        && config.spill == Spill::Host
        && made_here
        && size as u64 >= PAGE
        && rounded <= quota / 2)
        .then_some(rounded)
}

/// The bound the tier holds `device`'s blocks to: the quota, or the pool's
/// budget where that is lower (or the only one).
pub fn limit(state: &State, device: Device, quota: Option<u64>) -> Option<u64> {
    let budget = state.pool.and_then(|(_, pool)| pool.budget(device));
    match (quota, budget) {
        (Some(quota), Some(budget)) => Some(quota.min(budget)),
        (quota, budget) => quota.or(budget),
    }
}

/// Makes and records a tier block of `size` bytes (whole pages) on
/// `device`: on the device if its bytes are reserved (`on_device`), else in
/// host memory; its address. `None` if the virtual memory calls failed:
/// the caller makes the allocation as it would without the tier (any
/// reservation is still held).
pub fn place(
    state: &State,
    api: Api,
    device: Device,
    size: u64,
    on_device: bool,
) -> Option<*mut c_void> {
    let failed = |what: &str, rc: CUresult| {
        debug!("the spill tier could not make a block of {} ({what}: CUDA error {rc}); made without it", human_bytes(size));
    };
    backing::ready(api)
        .map_err(|rc| failed("context", rc))
        .ok()?;
    let ptr = backing::reserve(size)
        .map_err(|rc| failed("address range", rc))
        .ok()?;
    let made = if on_device {
        backing::create(size, device, true)
    } else {
        spare::take(state, size, device)
    };
    let handle = match made {
        Ok(handle) => handle,
        Err(rc) => {
            failed("physical memory", rc);
            backing::unreserve(ptr, size);
            return None;
        }
    };
    if let Err(rc) = backing::map(ptr, size, handle, device) {
        failed("mapping", rc);
        if on_device {
            backing::release(handle);
        } else {
            spare::give(state, device, handle);
        }
        backing::unreserve(ptr, size);
        return None;
    }
    // Host memory is also mapped at the staging half, where moves copy
    // to and from it.
    if !on_device {
        if let Err(rc) = backing::map(ptr + size, size, handle, device) {
            failed("mapping", rc);
            backing::unmap(ptr, size);
            spare::give(state, device, handle);
            backing::unreserve(ptr, size);
            return None;
        }
    }
    let (on, host) = if on_device { (handle, 0) } else { (0, handle) };
    let backing = Backing {
        size,
        device,
        on_device: on,
        in_host: host,
        fetched_in: 0,
        failed_ns: 0,
        born: state.tier.gate.entered(),
    };
    state.tier.blocks.insert(ptr as usize, backing);
    state.tier.active.store(true, SeqCst);
    if !on_device {
        state.tier.bytes_in_host.fetch_add(size, SeqCst);
        let usage = state.ledger.device(device);
        if usage.spills.fetch_add(1, Relaxed) == 0 {
            warn!("device {device} is at its quota: allocations now go to host memory, and move onto the device as kernels need them (the job slows down instead of failing)");
        }
    }
    record_block(state, api, ptr as usize, size, device, on_device, true);
    Some(ptr as *mut c_void)
}

/// Records a tier block of `size` bytes at `ptr`, handed out by `api`, on
/// the device or in host memory (`made`: new, not a kept one given again),
/// and its allocation event.
fn record_block(
    state: &State,
    api: Api,
    ptr: usize,
    size: u64,
    device: Device,
    on_device: bool,
    made: bool,
) {
    let placement = if on_device {
        Placement::Device
    } else {
        Placement::Host
    };
    let block = Block {
        size,
        device,
        pool: 0,
        placement,
        device_part: 0,
        api,
        managed: false,
        moving: false,
        tiered: true,
    };
    record_allocation(state, ptr as *mut c_void, block);
    super::pool_stats::handed_out(state, api, device, size, made);
}

/// Gives back a tier block the ledger has let go of, once the device has
/// finished with it (as `cudaFree` waits; unmapping would not).
pub fn free(state: &State, api: Api, ptr: usize, block: &Block) -> cudaError_t {
    let Some((_, backing)) = state.tier.blocks.remove(&ptr) else {
        return cudaErrorInvalidValue;
    };
    if let Err(rc) = backing::drain(api) {
        debug!("waiting for the device before freeing {ptr:#x}: CUDA error {rc}");
    }
    dismantle(state, ptr, &backing, true);
    if state.tier.blocks.is_empty() && crate::state::lock(&state.tier.kept).is_empty() {
        spare::release_all(state);
    }
    if block.placement == Placement::Host {
        state.tier.bytes_in_host.fetch_sub(backing.size, SeqCst);
    }
    cudaSuccess
}

/// Unmaps the tier block at `ptr` (the block itself if `mapped`), which no
/// work can touch any more, gives its range back, releases its device
/// memory and passes its host memory on ([`spare::give`]).
pub(super) fn dismantle(state: &State, ptr: usize, backing: &Backing, mapped: bool) {
    backing::unmap_block(
        ptr as CUdeviceptr,
        backing.size,
        mapped,
        backing.in_host != 0,
    );
    if backing.on_device != 0 {
        backing::release(backing.on_device);
    }
    if backing.in_host != 0 {
        spare::give(state, backing.device, backing.in_host);
    }
}

/// After CUDA refused to export `ptr` for another process (`rc`): if the
/// shim made the block as memory CUDA's IPC cannot export (one of the
/// tier's blocks, or managed memory in place of a `cudaMalloc` over the
/// quota), says so once of each kind, with the way out.
pub fn ipc_refused(api: Api, ptr: usize, rc: cudaError_t) {
    static SAID_TIER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    static SAID_MANAGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if rc == cudaSuccess {
        return;
    }
    let state = crate::state::state();
    let tiered = state
        .tier
        .blocks
        .iter()
        .any(|entry| (*entry.key()..*entry.key() + entry.value().size as usize).contains(&ptr));
    if tiered && !SAID_TIER.swap(true, Relaxed) {
        warn!("{} of {ptr:#x} failed (CUDA error {rc}): the block is virtual memory of vramshare's spill tier, which CUDA cannot export to another process; run the job with VRAMSHARE_MOVES=off to share its memory", api.name());
    }
    // The caller's own managed memory is the caller's affair.
    let made_managed = state.ledger.block_at(ptr).is_some_and(|block| {
        block.managed && !matches!(block.api, Api::cudaMallocManaged | Api::cuMemAllocManaged)
    });
    if made_managed && !SAID_MANAGED.swap(true, Relaxed) {
        warn!("{} of {ptr:#x} failed (CUDA error {rc}): vramshare made this block managed memory (it went over the quota, or this is a low-priority pool member), which CUDA cannot export to another process; a quota large enough for the memory the job shares keeps it exportable, and VRAMSHARE_SPILL=off makes such an allocation fail where it is made instead", api.name());
    }
}

/// Enters the gate for work handed to CUDA, once the tier has blocks.
pub fn enter(state: &State) -> Option<Inside<'_>> {
    state
        .tier
        .active
        .load(Relaxed)
        .then(|| state.tier.gate.enter())
}

/// Before work that names `named` (blocks by start): brings the tier's
/// among them that are in host memory (as the ledger says now: the
/// launches' index may lag behind a move) onto the device where they fit,
/// making room as the module says, and moving none of `named` out. A block
/// that cannot come is read in place.
pub fn fetch(state: &State, api: Api, named: &[usize]) {
    if named.is_empty() || state.tier.bytes_in_host.load(Relaxed) == 0 {
        return;
    }
    let backend = Backend::of(api);
    // The wait below is for the calling thread's device: only its blocks
    // move.
    let Ok(current) = backend.current_device() else {
        return;
    };
    // Where the job marks its steps, a block comes once a step: one the
    // step needs again after it made room for others is read in place, so
    // that blocks used all through a step do not chase each other over the
    // link, as predicting next uses from the step before would make them.
    // Where steps are only found in the launch sequence, the found step is
    // often a part of the real one, and such a cap only leaves blocks in
    // host memory: measured, a quarter slower for ResNet-50 at half its
    // peak. There a block comes whenever work names it (0 matches no
    // block's step).
    let step = if state.access.steps.steps() > 0 && state.access.steps.marked() {
        state.access.steps.current() + 1
    } else {
        0
    };
    // Only blocks that can come: the wait for the device is paid only then.
    let movable = |ptr: &usize| {
        state.ledger.block_at(*ptr).is_some_and(|b| {
            b.tiered
                && !b.moving
                && b.placement == Placement::Host
                && b.device == current
                && !held_back(state, *ptr, step)
                && could_fit(state, b, device_quota(state, b.device, backend), named)
        })
    };
    let coming: Vec<usize> = named.iter().copied().filter(movable).collect();
    if coming.is_empty() {
        return;
    }
    // A wait for the whole device would end a capture in error.
    if state.access.graphs.capturing_any() {
        return;
    }
    let Some(_closed) = state.tier.gate.close() else {
        return;
    };
    // Declared after the gate's guard, so dropped before it: should what
    // follows unwind, the gate opens only once the copies queued have
    // landed.
    let _copies = moves::WaitOnDrop(current);
    if !drained(state, api) {
        return;
    }
    let _timed = Timed(state, std::time::Instant::now());
    let mut staged: Vec<Staged> = Vec::new();
    let mut made_room_on = None;
    // Each move checks again that its block is where it was found.
    for ptr in coming {
        let Some(block) = state.ledger.block_at(ptr) else {
            continue;
        };
        let quota = device_quota(state, block.device, backend).unwrap_or(u64::MAX);
        let came = make_room(state, block.device, block.size, quota, named)
            && moves::stage_in(state, ptr, block)
                .map(|s| staged.push(s))
                .is_some();
        if came {
            let bound = limit(state, block.device, Some(quota)).unwrap_or(quota);
            made_room_on = Some((block.device, bound));
        } else if let Some(mut backing) = state.tier.blocks.get_mut(&ptr) {
            // No room after all (a pool's budget, say) or no memory: the
            // block is read in place for the rest of the step (where steps
            // are marked) and for a while, rather than every launch that
            // names it waiting for the device again.
            backing.fetched_in = step;
            backing.failed_ns = vramshare_common::process::monotonic_ns();
        }
    }
    // While those copies run, blocks move out until the move budget is
    // free again, for the next block to come at once: the link carries
    // both directions together.
    if let Some((device, quota)) = made_room_on {
        staged.extend(evict_ahead(state, device, quota, named));
    }
    moves::finish(state, staged);
}

/// The share of the quota kept free for blocks coming in (1/8), so that a
/// block's copy onto the device can start at once and the copies of the
/// blocks making room overlap it. The tier keeps that much less on the
/// device: a block that comes later waits for room to be made first.
const MOVE_BUDGET_DIVISOR: u64 = 8;

/// Stages moves to the host, least needed first, until the room under
/// `limit` (the quota, or the pool's budget if lower) on `device` would be
/// the move budget; `keep` stays.
fn evict_ahead(state: &State, device: Device, limit: u64, keep: &[usize]) -> Vec<Staged> {
    let budget = limit / MOVE_BUDGET_DIVISOR;
    let used = state.ledger.device(device).device_bytes.load(SeqCst);
    let mut room = limit
        .saturating_sub(used)
        .min(super::moves::pool_room(state, device));
    let mut staged = Vec::new();
    if room >= budget {
        return staged;
    }
    // Kept blocks go first: giving them back moves nothing.
    room += kept::give_back_while(state, device, false, |given| room + given < budget);
    if room >= budget {
        return staged;
    }
    let candidates = movable_blocks(state, device, keep);
    // Blocks larger than the budget stay: moving one out would leave more
    // free than the budget is for.
    for (_, size, ptr) in by_next_use(state, candidates) {
        if room >= budget {
            break;
        }
        if size > budget {
            continue;
        }
        if let Some(out) = moves::stage_out(state, ptr, size) {
            staged.push(out);
            room += size;
        }
    }
    staged
}

/// Waits for the device to finish the job's work before moves, behind the
/// closed gate; counts the wait and the drain. False if the wait failed
/// (nothing moves then).
fn drained(state: &State, api: Api) -> bool {
    let began = std::time::Instant::now();
    let drained = backing::drain(api);
    let tier = &state.tier;
    tier.drain_ns
        .fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    match drained {
        Ok(()) => {
            tier.fetches.fetch_add(1, Relaxed);
            true
        }
        Err(rc) => {
            debug!("waiting for the device before a move: CUDA error {rc}; nothing moves");
            false
        }
    }
}

/// Counts the time a move held the job back, when dropped.
struct Timed<'a>(&'a State, std::time::Instant);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let spent = self.1.elapsed().as_nanos() as u64;
        self.0.tier.move_ns.fetch_add(spent, Relaxed);
    }
}

/// How long a block whose move onto the device failed is read in place
/// before a move is tried again.
const RETRY_AFTER_NS: u64 = 20_000_000;

/// Whether the tier block at `ptr` stays in host memory for this use: it
/// came onto the device in `step` (plus one; 0 matches none) already, a
/// use then counted as left in place, or a move of it failed less than
/// [`RETRY_AFTER_NS`] ago.
fn held_back(state: &State, ptr: usize, step: u64) -> bool {
    let Some(backing) = state.tier.blocks.get(&ptr).map(|b| *b) else {
        return false;
    };
    if step != 0 && backing.fetched_in == step {
        state.tier.left_in_place.fetch_add(1, Relaxed);
        return true;
    }
    let failed = backing.failed_ns;
    failed != 0 && vramshare_common::process::monotonic_ns().saturating_sub(failed) < RETRY_AFTER_NS
}

/// Whether `block` could come onto its device under `quota` and the
/// pool's budget: it takes at most half of the lower, and the room left
/// under each, plus the tier's blocks there that the work does not name
/// (`keep`), would hold it.
fn could_fit(state: &State, block: Block, quota: Option<u64>, keep: &[usize]) -> bool {
    if block.size > limit(state, block.device, quota).unwrap_or(u64::MAX) / 2 {
        return false;
    }
    let quota = quota.unwrap_or(u64::MAX);
    let used = state.ledger.device(block.device).device_bytes.load(Relaxed);
    let room = quota.saturating_sub(used);
    // A pool's budget holds the members' device bytes together: moving
    // this process's blocks out frees that much of it, no more.
    let pool_room = super::moves::pool_room(state, block.device);
    let movable = movable_all(state, block.device, keep) + kept::on_device(state, block.device);
    room.saturating_add(movable) >= block.size && pool_room.saturating_add(movable) >= block.size
}

/// The tier's blocks on `device` that `keep` does not name, as (address,
/// size): what may move out to make room.
fn movable_blocks(state: &State, device: Device, keep: &[usize]) -> Vec<(usize, u64)> {
    timed(&state.tier.choose_ns, || {
        state
            .ledger
            .tier_on_device(device)
            .into_iter()
            .filter(|(ptr, _)| !keep.contains(ptr))
            .collect()
    })
}

/// Their bytes.
fn movable_all(state: &State, device: Device, keep: &[usize]) -> u64 {
    movable_blocks(state, device, keep)
        .iter()
        .map(|(_, size)| size)
        .sum()
}

/// Gives back the kept blocks on `device`, then moves the tier's blocks
/// there to the host, the least needed first, while `more(bytes freed so
/// far)` (a quota or a pool's budget cut, or a pool member of higher
/// priority wanting room). The bytes freed.
pub fn evict_while(state: &State, device: Device, mut more: impl FnMut(u64) -> bool) -> u64 {
    let first = state.ledger.tier_on_device(device).first().copied();
    let Some(api) = first
        .and_then(|(ptr, _)| state.ledger.block_at(ptr))
        .map(|block| block.api)
    else {
        return 0;
    };
    if state.access.graphs.capturing_any() || backing::ready(api).is_err() {
        return 0;
    }
    let Some(_closed) = state.tier.gate.close() else {
        return 0;
    };
    // Listed again behind the gate: a launch's move may have taken some.
    let candidates = state.ledger.tier_on_device(device);
    if !drained(state, api) {
        return 0;
    }
    let _timed = Timed(state, std::time::Instant::now());
    // Kept blocks first (their caller gave back those reached before): with
    // the device drained, every kept block's free is reached, and giving
    // one back moves nothing.
    let mut moved = kept::give_back_while(state, device, false, &mut more);
    for (_, size, ptr) in by_next_use(state, candidates) {
        if !more(moved) {
            break;
        }
        if move_out(state, ptr, size) {
            moved += size;
        }
    }
    moved
}

/// Blocks as (next use, size, address), the furthest next use first; of
/// equals, the largest.
fn by_next_use(state: &State, blocks: Vec<(usize, u64)>) -> Vec<(u64, u64, usize)> {
    timed(&state.tier.choose_ns, || {
        let starts: Vec<usize> = blocks.iter().map(|(ptr, _)| *ptr).collect();
        let next = state.access.next_uses(&state.ledger, &starts);
        let mut order: Vec<(u64, u64, usize)> = blocks
            .into_iter()
            .zip(next)
            .map(|((ptr, size), next)| (next, size, ptr))
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order
    })
}

/// Reserves `size` device bytes on `device` under `quota`, moving the
/// tier's blocks whose next use is furthest to the host until they fit.
/// Blocks in `keep` (the work's own) stay. False if there is no such room.
fn make_room(state: &State, device: Device, size: u64, quota: u64, keep: &[usize]) -> bool {
    if state.ledger.try_reserve(device, size, quota) {
        return true;
    }
    // Kept blocks go first: giving them back moves nothing.
    if kept::room_for(state, device, size, quota, false) {
        return true;
    }
    let candidates = movable_blocks(state, device, keep);
    let used = state.ledger.device(device).device_bytes.load(SeqCst);
    let movable: u64 = candidates.iter().map(|(_, size)| size).sum();
    if used.saturating_add(size).saturating_sub(movable) > quota {
        // Moving every candidate out would still leave too little room.
        return false;
    }
    // The bytes missing under the quota and under the pool's budget move
    // out together, so that each is remapped while the next ones copy.
    let short = used
        .saturating_add(size)
        .saturating_sub(quota)
        .max(size.saturating_sub(super::moves::pool_room(state, device)));
    let mut victims = by_next_use(state, candidates).into_iter();
    let mut staged = Vec::new();
    let mut freeing = 0;
    while freeing < short {
        let Some((_, victim, ptr)) = victims.next() else {
            break;
        };
        if let Some(out) = moves::stage_out(state, ptr, victim) {
            staged.push(out);
            freeing += victim;
        }
    }
    moves::finish(state, staged);
    if state.ledger.try_reserve(device, size, quota) {
        return true;
    }
    // A move failed, or the room went elsewhere: one more at a time.
    for (_, victim, ptr) in victims {
        if move_out(state, ptr, victim) && state.ledger.try_reserve(device, size, quota) {
            return true;
        }
    }
    false
}
