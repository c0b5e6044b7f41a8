//! One block's move, in two halves so that several can overlap: staged
//! (onto the device: its range remapped and its copy queued; to the host:
//! its copy queued, on the copy engine of its direction), then finished
//! once the copies are done (to the host: its range remapped; the ledger
//! told, the memory it left given back). A move that fails leaves the block
//! mapped where it was, with its bytes, and changes no count.
//!
//! A block's host memory, once made, stays mapped at its range's staging
//! half, so that each move remaps the block's range once: a move onto the
//! device maps new device memory at the block and copies the bytes in
//! from the staging half; a move to the host copies the bytes out to the
//! staging half and then maps the host memory at the block too. Both run
//! behind the closed gate with the device drained (or, where moves overlap
//! the job's kernels, once the block's own last use has completed, work
//! that names a block coming in waiting for its copy), so no kernel sees
//! the range while it is remapped or before its copy has landed.
//!
//! Each copy is followed by an event of its own, so that a move to the host
//! is finished (its range remapped, which costs about half its copy's time
//! again: the driver writes a page table entry for each host page) as soon
//! as its copy has landed, while the copies queued after it still run.
//! Where moves overlap the job's kernels, a copy to the host is handed to
//! the copier thread instead ([`super::copier`]), which makes it in small
//! pieces so that those remaps do not wait for long copies; the move waits
//! for it there. A move onto the device into memory a kept block lends
//! ([`super::kept::lend`]) copies on a stream of its own, made to wait for
//! that block's free.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use cudart_sys::*;
use vramshare_common::event::{Api, Op, Placement};

use crate::config::Device;
use crate::state::ledger::Block;
use crate::state::tier::Kept;
use crate::state::State;

use super::backing::{self, Direction};
use super::copier;
use super::kept;
use super::spare;

/// A move whose copy has been queued.
pub struct Staged {
    ptr: usize,
    size: u64,
    device: Device,
    direction: Direction,
    /// The memory the block moves to, and the memory it leaves.
    to: u64,
    from: u64,
    /// The host memory was made for this move (given back if it fails).
    made_host: bool,
    /// Recorded after its copy (`None`: the move waits for its stream).
    copied: Option<usize>,
    /// Its copy out, handed to the copier thread ([`super::copier`]).
    handed: Option<copier::Handed>,
    /// No work has entered since the block was handed out.
    fresh: bool,
    /// Onto the device, with the block's own event recorded after its
    /// copy: work that names it waits for that ([`super::uses`]), so the
    /// move is finished without waiting.
    ordered: bool,
}

/// Waits, when dropped, for the copies queued on its device, unless moves
/// overlap the job's kernels (`ordered_in`): there, those onto the device
/// are ordered before the work that needs them.
pub struct WaitOnDrop {
    pub device: Device,
    pub ordered_in: bool,
}

impl Drop for WaitOnDrop {
    fn drop(&mut self) {
        // Beside the kernels, moves to the host still copying (the mover
        // thread's) change nothing the job sees until they are finished:
        // no wait for them either. (A copy handed to the copier thread is
        // not on the stream until the thread queues it: a move dropped
        // unfinished waits for its own, [`copier::Handed`].)
        if !self.ordered_in {
            for direction in Direction::IN.into_iter().chain([Direction::ToHost]) {
                let _ = backing::wait(self.device, direction);
            }
        }
    }
}

thread_local! {
    /// Set on the mover thread ([`super::mover`]), whose time holds no job
    /// back and is counted apart.
    static ON_MOVER: Cell<Option<&'static State>> = const { Cell::new(None) };
}

/// Marks the calling thread as the mover of `state`'s moves.
pub(super) fn on_mover_thread(state: &'static State) {
    let _ = ON_MOVER.try_with(|on| on.set(Some(state)));
}

/// Runs `f`, adding the time it took to `counter`; on the mover thread, to
/// the mover's own counter of that kind instead, if it keeps one
/// ([`crate::state::outgoing::Outgoing`]).
pub(super) fn timed<T>(counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
    let began = Instant::now();
    let result = f();
    let spent = began.elapsed().as_nanos() as u64;
    match ON_MOVER.try_with(Cell::get).ok().flatten() {
        Some(state) => {
            let (tier, mover) = (&state.tier, &state.tier.outgoing);
            let kinds = [
                (&tier.copy_ns, &mover.copy_ns),
                (&tier.remap_ns, &mover.remap_ns),
                (&tier.memory_ns, &mover.memory_ns),
            ];
            if let Some((_, own)) = kinds.iter().find(|(of, _)| std::ptr::eq(*of, counter)) {
                own.fetch_add(spent, Relaxed);
            }
        }
        None => {
            counter.fetch_add(spent, Relaxed);
        }
    }
    result
}

/// Stages the move of a block in host memory onto the device, whose bytes
/// the caller reserved: device memory mapped at the block, the bytes
/// copied in from the host memory at the staging half; with `overlap`, the
/// block's own event recorded after the copy. `None` (and the reservation
/// given back) if it cannot move.
pub fn stage_in(state: &State, ptr: usize, block: Block, overlap: bool) -> Option<Staged> {
    let staged = stage_in_to(state, ptr, block, overlap, None);
    if staged.is_none() {
        state.ledger.unreserve(block.device, block.size);
    }
    staged
}

/// As [`stage_in`], with `overlap`, into the device memory of a kept block
/// of the same size whose free may not be reached yet ([`kept::lend`]): its
/// bytes are the ones reserved, and the copy waits for the free. `None` (and
/// the kept block kept again, as it was) if it cannot move.
/// `direction` is the stream that waits: [`Direction::AfterFree`] for a
/// block work names now, [`Direction::AheadAfterFree`] for one ahead of
/// need.
pub fn stage_in_lent(
    state: &State,
    ptr: usize,
    block: Block,
    lender: Kept,
    direction: Direction,
) -> Option<Staged> {
    let staged = stage_in_to(state, ptr, block, true, Some((&lender, direction)));
    match staged {
        Some(_) => kept::lent(state, lender),
        None => kept::not_lent(state, lender),
    }
    staged
}

fn stage_in_to(
    state: &State,
    ptr: usize,
    block: Block,
    overlap: bool,
    lender: Option<(&Kept, Direction)>,
) -> Option<Staged> {
    let (device, size) = (block.device, block.size);
    state.ledger.begin_tier_move(ptr, Placement::Host, size)?;
    let tier = &state.tier;
    let at = ptr as CUdeviceptr;
    let backing = state.tier.blocks.get(&ptr).map(|b| *b);
    let staged = backing.filter(|b| b.in_host != 0).and_then(|backing| {
        // The copy into a lender's memory is queued behind its free; a block
        // coming ahead whose stream cannot wait for it stays where it is.
        if let Some((lender, direction)) = lender {
            if !timed(&tier.queue_ns, || {
                kept::order_after(lender, device, direction)
            }) {
                return None;
            }
        }
        let handle = match lender {
            Some((lender, _)) => lender.backing.on_device,
            None => timed(&tier.memory_ns, || {
                timed(&tier.device_create_ns, || {
                    backing::create(size, device, true)
                })
            })
            .ok()?,
        };
        // New memory is released if the move fails; lent memory stays its
        // lender's.
        let release = |handle| {
            if lender.is_none() {
                backing::release(handle);
            }
        };
        let host = backing.in_host;
        if timed(&tier.remap_ns, || remap(at, size, device, handle, host)).is_err() {
            release(handle);
            return None;
        }
        // Into lent memory, on a stream of its own: the copy waits for the
        // lender's free, and the copies queued after it should not.
        let direction = match lender {
            Some((_, direction)) => direction,
            None => Direction::ToDevice,
        };
        let staged = Staged {
            ptr,
            size,
            device,
            direction,
            to: handle,
            from: host,
            made_host: false,
            copied: None,
            handed: None,
            fresh: backing.born == tier.gate.entered(),
            ordered: false,
        };
        let queued = timed(&tier.queue_ns, || {
            backing::copy(at, at + size, size, device, direction).map(|()| {
                if overlap && super::uses::arriving(state, ptr, device, direction) {
                    Staged {
                        ordered: true,
                        ..staged
                    }
                } else {
                    after_copy(state, staged)
                }
            })
        });
        match queued {
            Ok(staged) => Some(staged),
            Err(_) => {
                // The host memory still holds the bytes: mapped back.
                map_back(at, size, device, host);
                release(handle);
                None
            }
        }
    });
    if staged.is_none() {
        state.ledger.end_tier_move(ptr, Placement::Host);
    }
    staged
}

/// Stages the move of a block on the device to its host memory (made, and
/// mapped at the staging half, on its first move out): its bytes copied
/// there. `None` if it cannot move.
pub fn stage_out(state: &State, ptr: usize, size: u64) -> Option<Staged> {
    let block = state.ledger.begin_tier_move(ptr, Placement::Device, size)?;
    stage_begun_out(state, ptr, size, block.device)
}

/// As [`stage_out`], for a block on `device` whose move the ledger has
/// begun; `None` (and the ledger's move ended) if it cannot move.
pub fn stage_begun_out(state: &State, ptr: usize, size: u64, device: Device) -> Option<Staged> {
    let tier = &state.tier;
    let staging = ptr as CUdeviceptr + size;
    let backing = state.tier.blocks.get(&ptr).map(|b| *b);
    let staged = backing.and_then(|backing| {
        let made_host = backing.in_host == 0;
        let host = if made_host {
            let host = timed(&tier.memory_ns, || spare::take(state, size, device)).ok()?;
            if timed(&tier.remap_ns, || backing::map(staging, size, host, device)).is_err() {
                spare::give(state, device, host);
                return None;
            }
            host
        } else {
            backing.in_host
        };
        let staged = Staged {
            ptr,
            size,
            device,
            direction: Direction::ToHost,
            to: host,
            from: backing.on_device,
            made_host,
            copied: None,
            handed: None,
            fresh: false,
            ordered: false,
        };
        let queued = timed(&tier.queue_ns, || {
            // Beside the job's kernels, in pieces on the copier thread, so
            // that remaps beside them do not wait for long copies.
            let handed = super::uses::overlapping()
                .then(|| copier::hand(staging, ptr as CUdeviceptr, size, device))
                .flatten();
            match handed {
                Some(handed) => Ok(Staged {
                    handed: Some(handed),
                    ..staged
                }),
                None => backing::copy(staging, ptr as CUdeviceptr, size, device, Direction::ToHost)
                    .map(|()| after_copy(state, staged)),
            }
        });
        match queued {
            Ok(staged) => Some(staged),
            Err(_) => {
                if made_host {
                    backing::unmap(staging, size);
                    spare::give(state, device, host);
                }
                None
            }
        }
    });
    if staged.is_none() {
        state.ledger.end_tier_move(ptr, Placement::Device);
    }
    staged
}

/// Marks the end of `staged`'s copy with an event, where one can be had.
fn after_copy(state: &State, mut staged: Staged) -> Staged {
    let spare = kept::take_event(state, false);
    let Some(event) = spare.or_else(|| backing::make_event().ok()) else {
        return staged;
    };
    if backing::mark(event, staged.device, staged.direction).is_ok() {
        staged.copied = Some(event);
    } else {
        // Not kept: it may belong to another context.
        backing::destroy_event(event);
    }
    staged
}

/// Waits for the staged copies and finishes each move; whether each moved,
/// in order. Moves to the host are finished first, each once its own copy
/// has landed, so that their remaps overlap the copies still running.
pub fn finish(state: &State, staged: Vec<Staged>) -> Vec<bool> {
    finish_each(state, staged, |_, _| ())
}

/// [`finish`], telling `ended` each block's start and whether it moved as
/// soon as its move has ended, before the next is finished.
pub fn finish_each(
    state: &State,
    staged: Vec<Staged>,
    mut ended: impl FnMut(usize, bool),
) -> Vec<bool> {
    let mut moved = vec![false; staged.len()];
    let mut order: Vec<(usize, Staged)> = staged.into_iter().enumerate().collect();
    order.sort_by_key(|(_, move_)| move_.direction != Direction::ToHost);
    let mut waited: Vec<(Device, Direction, backing::Result<()>)> = Vec::new();
    for (i, mut move_) in order {
        let copied = match (move_.handed.take(), move_.copied) {
            (Some(handed), _) => timed(&state.tier.copy_ns, || handed.wait()),
            _ if move_.ordered => Ok(()),
            (None, Some(event)) => {
                let landed = timed(&state.tier.copy_ns, || backing::wait_event(event));
                kept::give_back_event(state, event, false);
                landed
            }
            (None, None) => wait_stream(state, &mut waited, move_.device, move_.direction),
        };
        let ptr = move_.ptr;
        moved[i] = finish_one(state, move_, copied);
        ended(ptr, moved[i]);
    }
    moved
}

/// Waits for every copy queued `direction` on `device`, once per finish.
fn wait_stream(
    state: &State,
    waited: &mut Vec<(Device, Direction, backing::Result<()>)>,
    device: Device,
    direction: Direction,
) -> backing::Result<()> {
    if let Some((_, _, result)) = waited
        .iter()
        .find(|(d, dir, _)| *d == device && *dir == direction)
    {
        return *result;
    }
    let result = timed(&state.tier.copy_ns, || backing::wait(device, direction));
    waited.push((device, direction, result));
    result
}

fn finish_one(state: &State, staged: Staged, copied: backing::Result<()>) -> bool {
    let Staged {
        ptr,
        size,
        device,
        direction,
        to,
        from,
        made_host,
        copied: _,
        handed: _,
        fresh,
        ordered: _,
    } = staged;
    let at = ptr as CUdeviceptr;
    let tier = &state.tier;
    let (op, placement, rc) = match direction {
        Direction::ToDevice | Direction::AfterFree | Direction::AheadAfterFree => match copied {
            Ok(()) => {
                if let Some(mut entry) = tier.blocks.get_mut(&ptr) {
                    entry.on_device = to;
                    entry.fetched_in = state.access.steps.current() + 1;
                    super::once::came_in(&mut entry);
                }
                count_move(state, device, direction, size);
                if direction.after_free() {
                    tier.moved_in_lent.fetch_add(size, Relaxed);
                }
                super::faults::moved(state, ptr, size, true);
                if fresh {
                    tier.moved_in_fresh.fetch_add(size, Relaxed);
                }
                state.ledger.end_tier_move(ptr, Placement::Device);
                (Op::Promote, Placement::Device, CUDA_SUCCESS)
            }
            Err(rc) => {
                // The copy may have landed in part: the host memory, which
                // still holds the bytes, is mapped back.
                timed(&tier.remap_ns, || map_back(at, size, device, from));
                timed(&tier.memory_ns, || kept::release_device(state, to));
                state.ledger.unreserve(device, size);
                state.ledger.end_tier_move(ptr, Placement::Host);
                (Op::Promote, Placement::Device, rc)
            }
        },
        Direction::ToHost => {
            let remapped = timed(&tier.remap_to_host_ns, || {
                copied.and_then(|()| timed(&tier.remap_ns, || remap(at, size, device, to, from)))
            });
            match remapped {
                Ok(()) => {
                    timed(&tier.memory_ns, || {
                        timed(&tier.device_release_ns, || {
                            kept::release_device(state, from)
                        })
                    });
                    if let Some(mut entry) = tier.blocks.get_mut(&ptr) {
                        entry.on_device = 0;
                        entry.in_host = to;
                        super::once::went_out(&mut entry);
                    }
                    count_move(state, device, Direction::ToHost, size);
                    super::faults::moved(state, ptr, size, false);
                    state.ledger.end_tier_move(ptr, Placement::Host);
                    (Op::Demote, Placement::Host, CUDA_SUCCESS)
                }
                Err(rc) => {
                    if made_host {
                        backing::unmap(at + size, size);
                        spare::give(state, device, to);
                    }
                    state.ledger.end_tier_move(ptr, Placement::Device);
                    (Op::Demote, Placement::Host, rc)
                }
            }
        }
    };
    state.record(
        op,
        Api::cuMemcpyAsync,
        device.number() as i32,
        ptr,
        size,
        placement,
        rc,
    );
    rc == CUDA_SUCCESS
}

/// Counts a move of `size` bytes that ended `direction`: the tier's bytes
/// in host memory, the moves and bytes each way, and the device's bytes
/// moved (for `vramshare ps`).
fn count_move(state: &State, device: Device, direction: Direction, size: u64) {
    let tier = &state.tier;
    let usage = state.ledger.device(device);
    usage.moved_bytes.fetch_add(size, Relaxed);
    let (moves, bytes) = match direction {
        Direction::ToDevice | Direction::AfterFree | Direction::AheadAfterFree => {
            tier.left_host(device, size);
            (&tier.moves_in, &tier.moved_in)
        }
        Direction::ToHost => {
            tier.entered_host(device, size);
            (&tier.moves_out, &tier.moved_out)
        }
    };
    moves.fetch_add(1, Relaxed);
    bytes.fetch_add(size, Relaxed);
}

/// Maps the block's range back to its host memory (`host`), which holds
/// its bytes, after a move onto the device failed: never to the device
/// memory it was remapped to, whose bytes may not have landed.
fn map_back(at: CUdeviceptr, size: u64, device: Device, host: u64) {
    backing::unmap(at, size);
    if let Err(rc) = backing::map(at, size, host, device) {
        error!("the spill tier could not map the block at {at:#x} back to its host memory (CUDA error {rc}); kernels that use it will fail");
    }
}

/// Remaps the block's range from `from` to `to`; on failure it maps `from`
/// (which holds the block's bytes) again.
fn remap(at: CUdeviceptr, size: u64, device: Device, to: u64, from: u64) -> backing::Result<()> {
    backing::unmap(at, size);
    if let Err(rc) = backing::map(at, size, to, device) {
        if let Err(again) = backing::map(at, size, from, device) {
            error!("the spill tier could not map the block at {at:#x} again (CUDA errors {rc}, {again}); kernels that use it will fail");
        }
        return Err(rc);
    }
    Ok(())
}

/// Moves a block on the device to the host, waiting for it.
pub fn move_out(state: &State, ptr: usize, size: u64) -> bool {
    stage_out(state, ptr, size).is_some_and(|staged| finish(state, vec![staged])[0])
}
