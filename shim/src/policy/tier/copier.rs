//! The copier threads, one a device, where moves overlap the job's
//! kernels: each makes the tier's copies out of its device in pieces of
//! [`PIECE`], one at a time, each queued once the one before has landed.
//!
//! Why: setting the device's access to a mapping waits for the copy out
//! of the device the copy engine is making, about 1 ms a mapping beside
//! copies queued back to back, which is what every move's remap paid while
//! later moves copied. Beside copies of 4 MiB queued one at a time, the
//! same mapping costs about what it costs with the link idle (0.17 against
//! 0.10 ms for 4 MiB of host memory, 0.28 against 0.25 for 16 MiB), while
//! the copies still carry 48 to 49 GB/s against 53 queued back to back
//! (`scripts/gpu/bench/remap_beside.cu`, bench/RESULTS.md). So the mover
//! thread's remaps run beside the copies after them at their own cost.
//!
//! A copy handed over is waited for through its [`Handed`]. Where the
//! thread does not run (it could not start, or this is a forked child,
//! which the parent's threads did not follow), the caller queues the copy
//! itself.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};

use cudart_sys::*;
use vramshare_common::size::MAX_DEVICES;

use crate::config::Device;
use crate::state::lock;
use crate::state::outgoing::Outgoing;

use super::backing::{self, Direction};
use super::moves::timed;

/// A piece of a copy out: 4 MiB cross the link in about 75 µs, the most
/// a remap beside it waits for.
const PIECE: u64 = 4 << 20;

/// A copy out handed to the thread, and what became of it.
#[derive(Default)]
struct Ticket {
    /// `None` until every piece has landed (`Ok`) or one failed.
    landed: Mutex<Option<backing::Result<()>>>,
    changed: Condvar,
}

impl Ticket {
    /// Waits until the copy has landed, or failed.
    fn wait(&self) -> backing::Result<()> {
        let landed = self
            .changed
            .wait_while(lock(&self.landed), |landed| landed.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        // Always landed here; an error rather than a panic all the same.
        landed.unwrap_or(Err(CUDA_ERROR_UNKNOWN))
    }

    fn end(&self, result: backing::Result<()>) {
        *lock(&self.landed) = Some(result);
        self.changed.notify_all();
    }
}

/// The caller's hold on a copy handed over: dropped unwaited (a move
/// given up on a panic), it still waits for the copy, whose pieces would
/// otherwise go on writing into host memory that may be given to another
/// block.
pub struct Handed(Arc<Ticket>);

impl Handed {
    /// Waits until the copy has landed, or failed.
    pub fn wait(&self) -> backing::Result<()> {
        self.0.wait()
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        let _ = self.0.wait();
    }
}

struct CopyOut {
    dst: CUdeviceptr,
    src: CUdeviceptr,
    size: u64,
    device: Device,
    /// The context current where it was handed over: the stream's.
    context: usize,
    ticket: Arc<Ticket>,
}

/// A device's copier: its copies waiting, and its thread.
struct Copier {
    waiting: Mutex<VecDeque<CopyOut>>,
    handed: Condvar,
    /// The thread asked to start, once (whether it did: `runs_in`).
    started: Once,
    /// The process whose thread runs: a forked child's parent's thread did
    /// not follow it.
    runs_in: AtomicU32,
}

/// One a device, so that one device's copies out do not wait for
/// another's.
static COPIERS: [Copier; MAX_DEVICES] = [const {
    Copier {
        waiting: Mutex::new(VecDeque::new()),
        handed: Condvar::new(),
        started: Once::new(),
        runs_in: AtomicU32::new(0),
    }
}; MAX_DEVICES];

/// `runs_in` in a forked child: the parent's threads did not follow, and
/// one may have been starting as it forked, so the child copies itself.
const FORKED: u32 = u32::MAX;

/// In a forked child, before anything else runs there: no copier thread
/// is taken for running.
pub fn forget_after_fork() {
    for copier in &COPIERS {
        copier.runs_in.store(FORKED, SeqCst);
    }
}

/// Hands the copy of `size` bytes from `src` (on `device`) to `dst` (host
/// memory mapped for it) to `device`'s copier thread: the caller's hold on
/// it, or `None` where the thread does not run (the caller copies).
pub fn hand(dst: CUdeviceptr, src: CUdeviceptr, size: u64, device: Device) -> Option<Handed> {
    let copier = &COPIERS[device.index()];
    if copier.runs_in.load(SeqCst) == FORKED {
        return None;
    }
    copier.started.call_once(|| start(copier));
    if copier.runs_in.load(SeqCst) != std::process::id() {
        return None;
    }
    let context = backing::current_context()?;
    let ticket = Arc::new(Ticket::default());
    lock(&copier.waiting).push_back(CopyOut {
        dst,
        src,
        size,
        device,
        context,
        ticket: ticket.clone(),
    });
    copier.handed.notify_one();
    Some(Handed(ticket))
}

/// Where the copiers' time is counted: the mover thread's record.
fn counted() -> &'static Outgoing {
    &crate::state::state().tier.outgoing
}

fn start(copier: &'static Copier) {
    let started = std::thread::Builder::new()
        .name("vramshare-copier".into())
        .spawn(move || run(copier));
    if let Err(error) = started {
        warn!(
            "the spill tier could not start a copier thread ({error}); copies out are queued whole"
        );
        return;
    }
    // Claimed by the process that started it.
    copier.runs_in.store(std::process::id(), SeqCst);
}

fn run(copier: &'static Copier) {
    backing::relax_capture_mode();
    let mut current = 0;
    loop {
        let next = {
            let mut waiting = lock(&copier.waiting);
            loop {
                if let Some(next) = waiting.pop_front() {
                    break next;
                }
                waiting = copier
                    .handed
                    .wait(waiting)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let copying = std::panic::AssertUnwindSafe(|| copy(&next, &mut current));
        let copied = timed(&counted().copier_busy_ns, || {
            std::panic::catch_unwind(copying).unwrap_or_else(|_| {
                error!("the spill tier's copier failed a copy out; the block stays on the device");
                Err(CUDA_ERROR_UNKNOWN)
            })
        });
        next.ticket.end(copied);
    }
}

/// Makes `out` piece by piece, each waited for before the next is queued.
fn copy(out: &CopyOut, current: &mut usize) -> backing::Result<()> {
    backing::make_current(out.context, current)?;
    let mut offset = 0;
    while offset < out.size {
        let bytes = PIECE.min(out.size - offset);
        timed(&counted().copier_queue_ns, || {
            backing::copy(
                out.dst + offset,
                out.src + offset,
                bytes,
                out.device,
                Direction::ToHost,
            )
        })?;
        // The stream runs its copies in order: this waits for the piece
        // just queued (and anything queued before it).
        backing::wait(out.device, Direction::ToHost)?;
        offset += bytes;
    }
    Ok(())
}
