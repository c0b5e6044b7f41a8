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
//! happen behind the gate ([`crate::state::gate::Gate`]): the job's other
//! threads hold their work back, and the device has finished everything
//! given to it, so no kernel is queued or running while a range is
//! remapped or before its copy has landed.
//!
//! The device bytes the ledger counts never exceed the quota: a block's
//! device memory is reserved before it is made, and a block moving out
//! counts on the device until its device memory is released.

pub mod ahead;
pub mod backing;
pub mod captured;
pub mod copier;
pub mod faults;
pub mod grouped;
pub mod kept;
pub mod mover;
mod moves;
pub mod once;
pub mod quiet;
mod room;
mod spare;
pub mod uses;

use std::ffi::c_void;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use cudart_sys::*;
use vramshare_common::event::{Api, Placement};

use crate::config::{human_bytes, Device, Moves, Spill};
use crate::cuda::backend::Backend;
use crate::cuda::host_costs;
use crate::state::gate::Inside;
use crate::state::ledger::Block;
use crate::state::tier::Backing;
use crate::state::{config, State};

use super::allocate::record_allocation;
use super::quota::device_quota;
use backing::PAGE;
use moves::Staged;
pub use once::Reads;
pub use room::{evict_while, room_for_new};

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
    (config.moves != Moves::Off
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
    let began = std::time::Instant::now();
    let placed = make(state, api, device, size, on_device);
    let tier = &state.tier;
    tier.place_ns
        .fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    tier.placed.fetch_add(u64::from(placed.is_some()), Relaxed);
    placed
}

/// [`place`], untimed.
fn make(
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
        used: 0,
        used_on: 0,
        used_runtime: false,
        known: false,
        uses_on_device: crate::state::tier::USES_UNKNOWN,
        once: false,
        read_in_place_in: 0,
    };
    state.tier.insert(ptr as usize, backing);
    state.tier.active.store(true, SeqCst);
    host_costs::count_from_now();
    if !on_device {
        state.tier.entered_host(device, size);
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
    let Some((_, backing)) = state.tier.remove(ptr) else {
        return cudaErrorInvalidValue;
    };
    if let Err(rc) = backing::drain(api) {
        debug!("waiting for the device before freeing {ptr:#x}: CUDA error {rc}");
    }
    dismantle(state, ptr, &backing, true);
    // With the device drained, the blocks that lent memory have reached
    // their frees: their host memory is kept or spare from here.
    kept::settle_lending(state);
    let none_held = crate::state::lock(&state.tier.kept).is_empty()
        && state.tier.lending.with(|lending| lending.is_empty());
    if state.tier.blocks.is_empty() && none_held {
        spare::release_all(state);
    }
    if block.placement == Placement::Host {
        state.tier.left_host(backing.device, backing.size);
    }
    cudaSuccess
}

/// Unmaps the tier block at `ptr` (the block itself if `mapped`), which no
/// work can touch any more, gives its range back, releases its device
/// memory and passes its host memory on ([`spare::give`]).
pub(super) fn dismantle(state: &State, ptr: usize, backing: &Backing, mapped: bool) {
    uses::forget(state, backing);
    backing::unmap_block(
        ptr as CUdeviceptr,
        backing.size,
        mapped,
        backing.in_host != 0,
    );
    if backing.on_device != 0 {
        kept::release_device(state, backing.on_device);
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

/// Whether the tier has blocks. Until it has, a use has nothing to move
/// or order, and a launch's hook skips the tier's work, and its code, at
/// once: a block the launch names existed before its hook began, so a
/// tier block among them would have made the tier active by then.
pub fn active(state: &State) -> bool {
    state.tier.active.load(Relaxed)
}

/// A use of `named`, in the trace's log of uses where it keeps one.
pub fn log_use(state: &State, named: &[usize]) {
    if let Some(trace) = &state.trace {
        if state.access.use_log.on() {
            state.access.use_log.used(trace.recorded(), named);
        }
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
/// that cannot come is read in place. Then, where steps are recorded, the
/// use goes into the record, blocks next used past the step's peak (where
/// the live blocks required the most out of the device) go out, and the
/// blocks of the uses to come are brought ahead
/// ([`ahead`]).
pub fn fetch(state: &'static State, api: Api, named: &[usize], reads: Reads) {
    log_use(state, named);
    let costs = &host_costs::HOST_COSTS;
    let recording = ahead::recording(state);
    host_costs::timed(&costs.fetch_ns, || {
        if recording {
            state.access.replay.record(named);
        }
        fetch_named(state, api, named, reads);
        once::count(state, named, reads);
    });
    if recording {
        host_costs::timed(&costs.ahead_ns, || ahead::bring(state, api));
    }
}

/// [`fetch`]'s moves for the use itself.
fn fetch_named(state: &'static State, api: Api, named: &[usize], reads: Reads) {
    // A named block the mover thread was to move out stays.
    mover::claim(state, named);
    kept::settle_lending(state);
    captured::settle(state);
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
                && !once::stays(state, *ptr, reads)
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
    // Where moves overlap the job's kernels, they run beside them, unless
    // a launch whose parameters the shim could not read may still be
    // running, or uses went unrecorded while the tier was quiet: then the
    // device is drained first (counted as the quiet's, which the drain
    // ends).
    let unread = uses::overlapping() && state.tier.unread_since_drain.load(Relaxed);
    let unread_launch = unread && !quiet::quiet(state);
    let mut strict = !uses::overlapping() || unread;
    // Declared after the gate's guard, so dropped before it: should what
    // follows unwind, the gate opens only once the copies queued have
    // landed (beside the job's kernels, those onto the device are ordered
    // before the work that names their blocks already).
    let mut copies = moves::WaitOnDrop {
        device: current,
        ordered_in: !strict,
    };
    if !begin(state, api, strict) {
        return;
    }
    if unread_launch {
        state.tier.drains_unread.fetch_add(1, Relaxed);
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
        let mut come = |strict: bool| {
            if !(strict || uses::wait_idle(state, ptr)) {
                return false;
            }
            let room = room::room_for_coming(state, block.device, block.size, quota, named, strict);
            let move_in = match room {
                Some(room::Room::Reserved) => moves::stage_in(state, ptr, block, !strict),
                Some(room::Room::Lent(lender)) => {
                    moves::stage_in_lent(state, ptr, block, lender, backing::Direction::AfterFree)
                }
                None => None,
            };
            move_in.map(|s| staged.push(s)).is_some()
        };
        let mut came = come(strict);
        if !came && !strict {
            // Too few blocks whose uses are known could make room: with the
            // device drained, any may.
            strict = true;
            copies.ordered_in = false;
            came = begin(state, api, true) && {
                state.tier.drains_for_room.fetch_add(1, Relaxed);
                come(true)
            };
        }
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
    // While those copies run, blocks move out until the room kept free
    // (the move budget, or twice it while blocks come ahead) is free again, for
    // the next block to come at once: the link carries both directions
    // together.
    if let Some((device, quota)) = made_room_on {
        staged.extend(room::evict_ahead(state, device, quota, named, strict));
    }
    moves::finish(state, staged);
}

/// Readies the device for moves behind the closed gate: with `strict`,
/// waits for it to finish the job's work ([`drained`]); beside the job's
/// kernels, only counts the moves. False if the wait failed.
pub(super) fn begin(state: &State, api: Api, strict: bool) -> bool {
    if !strict {
        state.tier.fetches.fetch_add(1, Relaxed);
        return true;
    }
    let drained = drained(state, api);
    if drained {
        // Every launch made before the gate closed has finished.
        state.tier.unread_since_drain.store(false, Relaxed);
        if quiet::ended(state) {
            state.tier.drains_quiet.fetch_add(1, Relaxed);
        }
    }
    drained
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
            tier.drains.fetch_add(1, Relaxed);
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
/// [`RETRY_AFTER_NS`] ago. (One that served one use a trip is left there
/// by [`once::stays`].)
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
    block.size <= limit(state, block.device, quota).unwrap_or(u64::MAX) / 2
        && room::could_make_room(
            state,
            block.device,
            block.size,
            quota.unwrap_or(u64::MAX),
            keep,
            true,
        )
}
