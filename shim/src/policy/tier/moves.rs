//! One block's move, in two halves so that several can overlap: staged
//! (its bytes copied, on the copy engine of its direction, into the memory
//! it moves to, mapped at its range's staging half), then finished once
//! the copies are done (its range remapped to that memory, the old memory
//! given back, the ledger told). A move that fails leaves the block mapped
//! where it was, with its bytes, and changes no count.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use cudart_sys::*;
use vramshare_common::event::{Api, Op, Placement};

use crate::config::Device;
use crate::state::ledger::Block;
use crate::state::State;

use super::backing::{self, Direction};

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
}

/// Stages the move of a block in host memory onto the device, whose bytes
/// the caller reserved; `None` (and the reservation given back) if it
/// cannot move.
pub fn stage_in(state: &State, ptr: usize, block: Block) -> Option<Staged> {
    let (device, size) = (block.device, block.size);
    let give_back = || state.ledger.unreserve(device, size);
    if state
        .ledger
        .begin_tier_move(ptr, Placement::Host, size)
        .is_none()
    {
        give_back();
        return None;
    }
    let backing = state.tier.blocks.get(&ptr).map(|b| *b);
    let staged = backing.and_then(|backing| {
        let handle = backing::create(size, device, true).ok()?;
        let staged = Staged {
            ptr,
            size,
            device,
            direction: Direction::ToDevice,
            to: handle,
            from: backing.in_host,
            made_host: false,
        };
        match copy(&staged) {
            Ok(()) => Some(staged),
            Err(_) => {
                backing::release(handle);
                None
            }
        }
    });
    if staged.is_none() {
        give_back();
        state.ledger.end_tier_move(ptr, Placement::Host);
    }
    staged
}

/// Stages the move of a block on the device to its host memory (made on
/// its first move out); `None` if it cannot move.
pub fn stage_out(state: &State, ptr: usize, size: u64) -> Option<Staged> {
    let block = state.ledger.begin_tier_move(ptr, Placement::Device, size)?;
    let device = block.device;
    let backing = state.tier.blocks.get(&ptr).map(|b| *b);
    let staged = backing.and_then(|backing| {
        let made_host = backing.in_host == 0;
        let host = if made_host {
            backing::create(size, device, false).ok()?
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
        };
        match copy(&staged) {
            Ok(()) => Some(staged),
            Err(_) => {
                if made_host {
                    backing::release(host);
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

/// Maps the destination at the staging half and queues the copy there.
fn copy(staged: &Staged) -> backing::Result<()> {
    let at = staged.ptr as CUdeviceptr;
    let staging = at + staged.size;
    backing::map(staging, staged.size, staged.to, staged.device)?;
    let queued = backing::copy(staging, at, staged.size, staged.device, staged.direction);
    if queued.is_err() {
        backing::unmap(staging, staged.size);
    }
    queued
}

/// Waits for the staged copies and finishes each move; whether each moved,
/// in order.
pub fn finish(state: &State, staged: Vec<Staged>) -> Vec<bool> {
    let mut waited: Vec<(Device, Direction, backing::Result<()>)> = Vec::new();
    staged
        .into_iter()
        .map(|move_| {
            let known = waited
                .iter()
                .find(|(d, dir, _)| *d == move_.device && *dir == move_.direction)
                .map(|(_, _, result)| *result);
            let copied = known.unwrap_or_else(|| {
                let result = backing::wait(move_.device, move_.direction);
                waited.push((move_.device, move_.direction, result));
                result
            });
            finish_one(state, move_, copied)
        })
        .collect()
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
    } = staged;
    let at = ptr as CUdeviceptr;
    backing::unmap(at + size, size);
    let remapped = copied.and_then(|()| remap(at, size, device, to, from));
    let (op, placement, rc) = match (direction, remapped) {
        (Direction::ToDevice, Ok(())) => {
            if let Some(mut entry) = state.tier.blocks.get_mut(&ptr) {
                entry.on_device = to;
                entry.fetched_in = state.access.steps.current() + 1;
            }
            state.tier.bytes_in_host.fetch_sub(size, SeqCst);
            state.tier.moved_in.fetch_add(size, Relaxed);
            state.tier.moves_in.fetch_add(1, Relaxed);
            state.ledger.end_tier_move(ptr, Placement::Device);
            (Op::Promote, Placement::Device, CUDA_SUCCESS)
        }
        (Direction::ToHost, Ok(())) => {
            backing::release(from);
            if let Some(mut entry) = state.tier.blocks.get_mut(&ptr) {
                entry.on_device = 0;
                entry.in_host = to;
            }
            state.tier.bytes_in_host.fetch_add(size, SeqCst);
            state.tier.moved_out.fetch_add(size, Relaxed);
            state.tier.moves_out.fetch_add(1, Relaxed);
            state.ledger.end_tier_move(ptr, Placement::Host);
            (Op::Demote, Placement::Host, CUDA_SUCCESS)
        }
        (Direction::ToDevice, Err(rc)) => {
            backing::release(to);
            state.ledger.unreserve(device, size);
            state.ledger.end_tier_move(ptr, Placement::Host);
            (Op::Promote, Placement::Device, rc)
        }
        (Direction::ToHost, Err(rc)) => {
            if made_host {
                backing::release(to);
            }
            state.ledger.end_tier_move(ptr, Placement::Device);
            (Op::Demote, Placement::Host, rc)
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

/// Remaps the block's range from `from` to `to`; on failure it maps `from`
/// again.
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
