//! Moves to the host handed to the shim's mover thread, where moves overlap
//! the job's kernels ([`crate::policy::tier::mover`]): each block stays
//! marked as moving in the ledger, on the device and counted there, until
//! the thread has copied it out and remapped its range, or work that names
//! it has claimed it back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::Device;

/// One block to move out: where, and the context its device's work is
/// given in (the thread makes it current).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaving {
    pub ptr: usize,
    pub size: u64,
    pub device: Device,
    pub context: usize,
}

#[derive(Default)]
pub struct Queue {
    /// Handed over, not begun, the oldest first.
    pub waiting: VecDeque<Leaving>,
    /// The moves the thread has begun and not yet finished.
    pub busy: Vec<Leaving>,
    /// Moves over (made, failed or claimed back), so that a waiter sees
    /// progress.
    pub ended: u64,
}

#[derive(Default)]
pub struct Outgoing {
    pub queue: Mutex<Queue>,
    /// Signalled when a move is handed over and when one ends.
    pub changed: Condvar,
    /// Moves waiting or under way: while 0, work names blocks without
    /// taking the lock.
    pub pending: AtomicU64,
    /// Whether the thread runs (asked once, at the first move handed over).
    pub thread: OnceLock<bool>,
    /// Time the thread spent making moves, and the moves it made.
    pub busy_ns: AtomicU64,
    pub made: AtomicU64,
    /// Of `busy_ns`: waiting for its copies to land, remapping ranges
    /// (host memory mapped at the block, and at the staging half where it
    /// is new), and making and releasing physical memory (pinning host
    /// memory included).
    pub copy_ns: AtomicU64,
    pub remap_ns: AtomicU64,
    pub memory_ns: AtomicU64,
    /// Moves claimed back by work that named their block.
    pub claimed: AtomicU64,
    /// Time the job's threads waited for moves under way that their work
    /// claimed (not a part of the moves' time).
    pub claim_wait_ns: AtomicU64,
    /// Time the job's threads waited for the moves under way to land, for
    /// the room they free (a new block, or room for a block coming in).
    pub room_wait_ns: AtomicU64,
    /// The copier threads' time with a copy out under way (from taking it
    /// to its last piece landed), and of it the time in the calls that
    /// queue each piece on the copy stream: beside the moves' own times,
    /// whether the link or the threads that feed it set the pace of the
    /// moves out.
    pub copier_busy_ns: AtomicU64,
    pub copier_queue_ns: AtomicU64,
    /// Set by the process's exit handler: no move begins after it.
    pub exiting: AtomicBool,
}

impl Outgoing {
    /// Drops the moves not begun that `pick` picks from `queue` (this
    /// one's, locked), their blocks left where they are, as `ledger` is
    /// told; how many.
    pub fn drop_waiting(
        &self,
        queue: &mut Queue,
        ledger: &super::ledger::Ledger,
        pick: impl Fn(&Leaving) -> bool,
    ) -> u64 {
        let before = queue.waiting.len();
        queue.waiting.retain(|leaving| {
            let drop = pick(leaving);
            if drop {
                ledger.end_tier_move(leaving.ptr, vramshare_common::event::Placement::Device);
            }
            !drop
        });
        let dropped = (before - queue.waiting.len()) as u64;
        self.pending.fetch_sub(dropped, SeqCst);
        queue.ended += dropped;
        dropped
    }

    /// At the process's exit: no move begins from now on, and the moves
    /// under way are waited for, up to `timeout` (CUDA is torn down after
    /// the exit handlers; the job's calls then pass straight through and
    /// claim nothing). The moves not begun leave their blocks where they
    /// are, as `ledger` is told.
    pub fn close(&self, ledger: &super::ledger::Ledger, timeout: Duration) {
        self.exiting.store(true, SeqCst);
        let began = Instant::now();
        let mut queue = super::lock(&self.queue);
        self.drop_waiting(&mut queue, ledger, |_| true);
        while !queue.busy.is_empty() {
            let Some(left) = timeout.checked_sub(began.elapsed()) else {
                break;
            };
            queue = match self.changed.wait_timeout(queue, left) {
                Ok((queue, _)) => queue,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}
