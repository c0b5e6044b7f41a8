//! The shim's mover thread, where moves overlap the job's kernels: a block
//! chosen to go out ahead of need (its last use finished, its uses known)
//! is handed to it, and the thread makes the whole move (host memory made
//! or taken, the copy out, which a copier thread makes in pieces,
//! [`super::copier`], the wait for it, the remap, the device memory given
//! back) while the job's threads go on giving work. Pinning host memory and
//! remapping a range to it are the costliest parts of a move; made here,
//! they no longer hold the job back.
//!
//! Until the move ends, the block is on the device for everyone: its
//! device memory stays mapped, with its bytes, and counts under the quota.
//! Work that names the block claims it back first ([`claim`]): a move not
//! begun is dropped, one under way is waited for (the block is then read
//! where it went). Work whose uses are not known claims every move
//! ([`claim_all`]). So the range is remapped only while no work the shim
//! let through may touch it.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{MutexGuard, PoisonError};

use vramshare_common::event::Placement;

use crate::config::Device;
use crate::state::outgoing::{Leaving, Outgoing, Queue};
use crate::state::{lock, State};

use super::backing;
use super::moves::{self, Staged};

/// Hands the move of the block at `ptr` (`size` bytes, on the device, not
/// moving) to the mover thread. False if it was not handed over (no
/// thread, the process exiting, no current context, or the block is not
/// where it was): the caller may make the move itself.
pub fn send(state: &'static State, ptr: usize, size: u64) -> bool {
    let outgoing = &state.tier.outgoing;
    if outgoing.exiting.load(SeqCst) || !*outgoing.thread.get_or_init(|| start(state)) {
        return false;
    }
    let Some(context) = backing::current_context() else {
        return false;
    };
    let Some(block) = state.ledger.begin_tier_move(ptr, Placement::Device, size) else {
        return false;
    };
    let leaving = Leaving {
        ptr,
        size,
        device: block.device,
        context,
    };
    let mut queue = lock(&outgoing.queue);
    queue.waiting.push_back(leaving);
    outgoing.pending.fetch_add(1, SeqCst);
    drop(queue);
    outgoing.changed.notify_all();
    true
}

/// Before work that may touch `ptrs` (blocks by start): their moves not
/// begun are dropped (the blocks stay on the device), and one under way is
/// waited for.
#[inline]
pub fn claim(state: &State, ptrs: &[usize]) {
    if !ptrs.is_empty() && state.tier.outgoing.pending.load(SeqCst) != 0 {
        claim_pending(state, ptrs);
    }
}

/// [`claim`] while moves are pending: out of line, so that a use while
/// none are skips its code.
#[inline(never)]
fn claim_pending(state: &State, ptrs: &[usize]) {
    let outgoing = &state.tier.outgoing;
    settle(state, outgoing, |leaving| ptrs.contains(&leaving.ptr));
}

/// Before work whose uses are not known: every move is claimed back.
pub fn claim_all(state: &State) {
    let outgoing = &state.tier.outgoing;
    if outgoing.pending.load(SeqCst) == 0 {
        return;
    }
    settle(state, outgoing, |_| true);
}

/// Drops the moves not begun that `claimed` picks, then waits while one it
/// picks is under way.
fn settle(state: &State, outgoing: &Outgoing, claimed: impl Fn(&Leaving) -> bool) {
    let mut queue = lock(&outgoing.queue);
    let dropped = outgoing.drop_waiting(&mut queue, &state.ledger, &claimed);
    if dropped > 0 {
        outgoing.claimed.fetch_add(dropped, Relaxed);
        outgoing.changed.notify_all();
    }
    if queue.busy.iter().any(&claimed) {
        let began = std::time::Instant::now();
        while queue.busy.iter().any(&claimed) {
            queue = wait(outgoing, queue);
        }
        outgoing
            .claim_wait_ns
            .fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    }
}

/// The bytes on `device` of the moves waiting or under way: room that is
/// being made.
pub fn leaving(state: &State, device: Device) -> u64 {
    let outgoing = &state.tier.outgoing;
    if outgoing.pending.load(SeqCst) == 0 {
        return 0;
    }
    let queue = lock(&outgoing.queue);
    // A move that has landed is off the device already, though the thread
    // may not have ended it yet.
    let still = |leaving: &&Leaving| {
        state
            .ledger
            .block_at(leaving.ptr)
            .is_some_and(|block| block.moving && block.placement == Placement::Device)
    };
    queue
        .waiting
        .iter()
        .chain(queue.busy.iter())
        .filter(|leaving| leaving.device == device)
        .filter(still)
        .map(|leaving| leaving.size)
        .sum()
}

/// Waits until one more move has ended; false (at once) if none is waiting
/// or under way.
fn wait_for_one(state: &State) -> bool {
    let outgoing = &state.tier.outgoing;
    if outgoing.pending.load(SeqCst) == 0 {
        return false;
    }
    let mut queue = lock(&outgoing.queue);
    let ended = queue.ended;
    let mut waited = false;
    while queue.ended == ended && (!queue.busy.is_empty() || !queue.waiting.is_empty()) {
        waited = true;
        queue = wait(outgoing, queue);
    }
    waited || queue.ended != ended
}

/// Reserves `size` bytes on `device` under `limit` as the thread's moves
/// free their room, waiting for at most `moves` of them to end; whether it
/// did.
/// The time waited is counted: where the mover sets the pace, the job's
/// threads spend it here.
pub fn reserve_as_moves_land(
    state: &State,
    device: Device,
    size: u64,
    limit: u64,
    moves: usize,
) -> bool {
    let began = std::time::Instant::now();
    let mut waited = false;
    let mut fits = false;
    for _ in 0..moves {
        if !wait_for_one(state) {
            break;
        }
        waited = true;
        if state.ledger.try_reserve(device, size, limit) {
            fits = true;
            break;
        }
    }
    if waited {
        state
            .tier
            .outgoing
            .room_wait_ns
            .fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    }
    fits
}

fn wait<'a>(outgoing: &Outgoing, queue: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
    outgoing
        .changed
        .wait(queue)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Starts the mover thread; whether it runs.
fn start(state: &'static State) -> bool {
    let started = std::thread::Builder::new()
        .name("vramshare-mover".into())
        .spawn(move || run(state));
    if let Err(error) = started {
        warn!("the spill tier could not start its mover thread ({error}); blocks move out on the job's threads");
        return false;
    }
    true
}

/// The most moves the thread begins before it finishes them: their copies
/// are queued together, and each is remapped as soon as its own copy has
/// landed, while the later ones still copy.
pub const BATCH: usize = 32;

/// The thread: makes the moves handed over, the oldest first.
fn run(state: &'static State) {
    let outgoing = &state.tier.outgoing;
    moves::on_mover_thread(state);
    backing::relax_capture_mode();
    let mut context = 0;
    loop {
        {
            let mut queue = lock(&outgoing.queue);
            while queue.waiting.is_empty() || outgoing.exiting.load(SeqCst) {
                queue = wait(outgoing, queue);
            }
        }
        // The thread's time is counted as each move ends, then here.
        let mut counted = std::time::Instant::now();
        let mut taken = Vec::new();
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            make(state, &mut taken, &mut context, &mut counted)
        }));
        if made.is_err() {
            error!(
                "the spill tier's mover thread failed moving {} blocks; they stay where they are",
                taken.len()
            );
            for leaving in &taken {
                // Where the ledger was not told (the likeliest): a free of
                // the block would wait for the move for ever.
                if state.ledger.block_at(leaving.ptr).is_some_and(|b| b.moving) {
                    state.ledger.end_tier_move(leaving.ptr, Placement::Device);
                }
            }
        }
        outgoing
            .busy_ns
            .fetch_add(counted.elapsed().as_nanos() as u64, Relaxed);
        let mut queue = lock(&outgoing.queue);
        queue.busy.retain(|leaving| !taken.contains(leaving));
        queue.ended += taken.len() as u64;
        outgoing.pending.fetch_sub(taken.len() as u64, SeqCst);
        drop(queue);
        outgoing.changed.notify_all();
    }
}

/// Begins up to [`BATCH`] of the moves waiting, each taken out of the queue
/// as it begins (`taken`: those begun and not yet ended; until then work
/// may still claim a move back), each in its block's context (`current`:
/// the one made current last), and finishes each as its copy lands (those
/// begun in one context before the next context's). Every move taken ends
/// the ledger's move, made or failed, and is ended here ([`end`]) as soon
/// as it is over.
fn make(
    state: &State,
    taken: &mut Vec<Leaving>,
    current: &mut usize,
    counted: &mut std::time::Instant,
) {
    let outgoing = &state.tier.outgoing;
    let mut staged = Vec::new();
    while taken.len() < BATCH {
        let next = {
            let mut queue = lock(&outgoing.queue);
            if outgoing.exiting.load(SeqCst) {
                break;
            }
            let Some(next) = queue.waiting.pop_front() else {
                break;
            };
            queue.busy.push(next);
            next
        };
        taken.push(next);
        if *current != next.context && !staged.is_empty() {
            // Finished in the context they were queued in.
            finish(state, std::mem::take(&mut staged), taken, counted);
        }
        if backing::make_current(next.context, current).is_err() {
            state.ledger.end_tier_move(next.ptr, Placement::Device);
            end(state, taken, counted, next.ptr, false);
            continue;
        }
        // Ends the ledger's move if it cannot be staged.
        match moves::stage_begun_out(state, next.ptr, next.size, next.device) {
            Some(move_) => staged.push(move_),
            None => end(state, taken, counted, next.ptr, false),
        }
    }
    finish(state, staged, taken, counted);
}

/// Finishes `staged`, each move ended ([`end`]) as soon as it is made, so
/// that an allocation goes on once its room has landed, not at the batch's
/// end.
fn finish(
    state: &State,
    staged: Vec<Staged>,
    taken: &mut Vec<Leaving>,
    counted: &mut std::time::Instant,
) {
    moves::finish_each(state, staged, |ptr, moved| {
        end(state, taken, counted, ptr, moved)
    });
}

/// Ends the move of the block at `ptr`, over (`moved`: made): counted, with
/// the thread's time since `counted`, then taken out of `taken` and of the
/// queue, and the threads waiting for room or for the move told. Counted
/// first: the process's exit waits only while moves are under way (in the
/// queue's `busy`) before it writes the trace. A block is in `taken` once:
/// it is moving in the ledger until its move is over, and no other move of
/// it begins till then.
fn end(
    state: &State,
    taken: &mut Vec<Leaving>,
    counted: &mut std::time::Instant,
    ptr: usize,
    moved: bool,
) {
    let outgoing = &state.tier.outgoing;
    if moved {
        outgoing.made.fetch_add(1, Relaxed);
    }
    let now = std::time::Instant::now();
    let spent = now.duration_since(*counted).as_nanos() as u64;
    outgoing.busy_ns.fetch_add(spent, Relaxed);
    *counted = now;
    let Some(at) = taken.iter().position(|leaving| leaving.ptr == ptr) else {
        return;
    };
    let leaving = taken.swap_remove(at);
    let mut queue = lock(&outgoing.queue);
    queue.busy.retain(|busy| *busy != leaving);
    queue.ended += 1;
    outgoing.pending.fetch_sub(1, SeqCst);
    drop(queue);
    outgoing.changed.notify_all();
}
