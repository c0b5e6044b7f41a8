//! Moves out begun as soon as a block's last use before a long gap ends.
//! A training step's forward fills the device up to the quota before any
//! block goes out, and then waits for room at the pace the moves out free
//! it: the link is idle while the forward's first kernels run. Where the
//! job marks its steps and the step before had to move blocks out, a block
//! a use names whose next use (by the step before's record) is more than
//! half a step away is handed to the mover thread once that use has
//! finished, up to as many bytes a step as the step before held beyond
//! the quota at its high: the activations the forward makes first, which
//! the backward needs last.
//!
//! A block handed over stays on the device for everyone until its move
//! ends, and work that names it first claims it back ([`super::mover`]): a
//! wrong guess costs link traffic, never correctness.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use vramshare_common::event::{Api, Placement};

use crate::cuda::backend::Backend;
use crate::policy::quota::device_quota;
use crate::state::{lock, State};

use super::{ahead, mover, uses};

/// The step the budget below is for, the most bytes its blocks held on the
/// device and in the tier's host memory together, the bytes it may send
/// early, and those sent so far.
static STEP: AtomicU64 = AtomicU64::new(u64::MAX);
static HIGH: AtomicU64 = AtomicU64::new(0);
static BUDGET: AtomicU64 = AtomicU64::new(0);
static SENT: AtomicU64 = AtomicU64::new(0);

/// Blocks chosen to go once their use in flight has finished, as (start,
/// size, when it was handed out: a block freed meanwhile and its start
/// handed to another is not that block), and how many there are (read
/// without the lock).
static WAITING: Mutex<Vec<(usize, u64, u64)>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether blocks wait to go early: only then is the gate closed for them.
pub(super) fn waiting() -> bool {
    COUNT.load(Relaxed) > 0
}

/// After work that named `named` recorded its uses (their events are the
/// latest of those blocks), where steps are recorded: those whose next use
/// is more than half a step away wait to go, within the step's budget.
pub(super) fn note(state: &State, api: Api, named: &[usize]) {
    if named.is_empty() || !ahead::recording(state) {
        return;
    }
    let backend = Backend::of(api);
    let Ok(device) = backend.current_device() else {
        return;
    };
    let held = state.ledger.device(device).device_bytes.load(Relaxed)
        + state.tier.bytes_in_host.load(Relaxed);
    let step = state.access.steps.current();
    if STEP.swap(step, Relaxed) != step {
        // What the step before held beyond the quota at its high had to
        // be off the device then.
        let high = HIGH.swap(held, Relaxed);
        let quota = device_quota(state, device, backend);
        let bound = super::limit(state, device, quota).unwrap_or(u64::MAX);
        BUDGET.store(high.saturating_sub(bound), Relaxed);
        SENT.store(0, Relaxed);
        lock(&WAITING).clear();
        COUNT.store(0, Relaxed);
    } else {
        HIGH.fetch_max(held, Relaxed);
    }
    let budget = BUDGET.load(Relaxed);
    let half = state.access.replay.length() as u64 / 2;
    if SENT.load(Relaxed) >= budget || half == 0 {
        return;
    }
    let mut waiting = lock(&WAITING);
    let on_device: Vec<(usize, u64)> = named
        .iter()
        .filter_map(|ptr| {
            let block = state.ledger.block_at(*ptr)?;
            let fits = block.tiered
                && !block.moving
                && block.placement == Placement::Device
                && !waiting.iter().any(|(p, _, _)| p == ptr);
            fits.then_some((*ptr, block.size))
        })
        .collect();
    if on_device.is_empty() {
        return;
    }
    let starts: Vec<usize> = on_device.iter().map(|(ptr, _)| *ptr).collect();
    let next = state.access.replay.next_uses(&starts);
    for ((ptr, size), next) in on_device.into_iter().zip(next) {
        let far = next.is_some_and(|n| n > half);
        let Some(born) = born(state, ptr) else {
            continue;
        };
        if far && SENT.load(Relaxed) + size <= budget {
            SENT.fetch_add(size, Relaxed);
            waiting.push((ptr, size, born));
        }
    }
    COUNT.store(waiting.len(), Relaxed);
}

/// Before work naming `named`, with the gate closed: the waiting blocks
/// whose last uses have finished go to the mover thread (not those the
/// work names); those that moved or went meanwhile are dropped.
pub(super) fn send(state: &'static State, named: &[usize]) {
    let mut waiting = lock(&WAITING);
    if waiting.is_empty() {
        return;
    }
    waiting.retain(|&(ptr, size, handed_out)| {
        if named.contains(&ptr) {
            return true;
        }
        let Some(block) = state.ledger.block_at(ptr) else {
            return false;
        };
        let same = block.size == size && born(state, ptr) == Some(handed_out);
        if !same || block.moving || block.placement != Placement::Device {
            return false;
        }
        if !uses::known(state, ptr) {
            return false;
        }
        if !uses::idle(state, ptr) {
            return true;
        }
        if mover::send(state, ptr, size) {
            state.tier.early_bytes.fetch_add(size, Relaxed);
        }
        false
    });
    COUNT.store(waiting.len(), Relaxed);
}

/// When the tier's block at `ptr` was handed out (the gate's count then).
fn born(state: &State, ptr: usize) -> Option<u64> {
    state.tier.blocks.get(&ptr).map(|backing| backing.born)
}
