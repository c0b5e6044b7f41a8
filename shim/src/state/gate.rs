//! The gate that holds the job's launches back while the spill tier's
//! blocks are remapped.

use std::cell::Cell;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Mutex, MutexGuard};

/// Launches, copies and library calls enter the gate while they hand work
/// to CUDA; a move closes it, waits until no thread is inside, and then
/// waits for the device to finish everything the job gave it. While it
/// remaps, no kernel of the job is queued or running, so none can read a
/// block's range between its unmapping and its new mapping, or before the
/// copy into its new memory has landed, whether or not the shim saw the
/// kernel's pointer to it.
#[derive(Default)]
pub struct Gate {
    closed: AtomicBool,
    inside: AtomicU64,
    /// Work (launches, copies, library calls) entered so far.
    entered: AtomicU64,
    mover: Mutex<()>,
}

/// How long a move waits for the threads inside to leave before it gives
/// way (and the block it was for is read where it is).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

thread_local! {
    /// How deep this thread is in gated calls (a library call's own
    /// launches are inside its call).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// A thread inside the gate; leaves it when dropped.
pub struct Inside<'a> {
    gate: &'a Gate,
    /// Whether this entry is counted in `inside` (the thread's outermost).
    counted: bool,
}

/// The gate closed for a move; opens when dropped.
pub struct Closed<'a> {
    gate: &'a Gate,
    _mover: MutexGuard<'a, ()>,
}

impl Gate {
    /// Enters, waiting while a move holds the gate closed. A thread
    /// already inside (a library call's launches) goes on.
    pub fn enter(&self) -> Inside<'_> {
        let depth = DEPTH.try_with(|d| d.replace(d.get() + 1)).unwrap_or(1);
        let counted = depth == 0;
        if counted {
            self.entered.fetch_add(1, Relaxed);
            loop {
                self.inside.fetch_add(1, SeqCst);
                if !self.closed.load(SeqCst) {
                    break;
                }
                self.inside.fetch_sub(1, SeqCst);
                while self.closed.load(SeqCst) {
                    std::thread::yield_now();
                }
            }
        }
        Inside {
            gate: self,
            counted,
        }
    }

    /// Work entered so far.
    pub fn entered(&self) -> u64 {
        self.entered.load(Relaxed)
    }

    /// Closes the gate for a move, once no other thread is inside; `None`
    /// if this thread is inside (the move would wait for itself) or another
    /// thread is moving (the caller's blocks are read where they are).
    pub fn close(&self) -> Option<Closed<'_>> {
        if DEPTH.try_with(|d| d.get()).unwrap_or(1) != 0 {
            return None;
        }
        // A panic in an earlier move (caught at the hook) leaves no state
        // behind the lock: its guard is taken back.
        let mover = match self.mover.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        self.closed.store(true, SeqCst);
        let closed = Closed {
            gate: self,
            _mover: mover,
        };
        // A thread inside may be waiting for work that another thread has
        // yet to launch (a synchronous copy after an event): the move gives
        // way rather than wait for ever.
        let began = std::time::Instant::now();
        while self.inside.load(SeqCst) != 0 {
            if began.elapsed() > CLOSE_WAIT {
                return None;
            }
            std::thread::yield_now();
        }
        Some(closed)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        if self.counted {
            self.gate.inside.fetch_sub(1, SeqCst);
        }
    }
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.gate.closed.store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_move_waits_for_work_inside_gives_way_to_a_long_one_and_holds_new_work_back() {
        let gate: &'static Gate = Box::leak(Box::default());
        let inside = gate.enter();
        // Nested entries (a library call's launches) do not wait.
        drop(gate.enter());
        assert!(gate.close().is_none(), "a thread inside cannot close");
        // Another thread's move gives way to work that stays inside.
        let began = Instant::now();
        let gave_way = std::thread::spawn(move || gate.close().is_none());
        assert!(gave_way.join().unwrap());
        assert!(began.elapsed() >= CLOSE_WAIT);
        // Work that leaves in time lets the move close the gate.
        let mover = std::thread::spawn(move || {
            let closed = gate.close().expect("the thread inside leaves in time");
            std::thread::sleep(Duration::from_millis(50));
            drop(closed);
        });
        std::thread::sleep(Duration::from_millis(2));
        drop(inside);
        std::thread::sleep(Duration::from_millis(10));
        let began = Instant::now();
        drop(gate.enter());
        assert!(
            began.elapsed() >= Duration::from_millis(20),
            "new work waits for the move"
        );
        mover.join().unwrap();
    }
}
