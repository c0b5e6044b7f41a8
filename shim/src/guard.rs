//! What every hook does around its body: a per-thread re-entrancy guard and a
//! wall that no panic crosses.
//!
//! A call that arrives while the same thread is already inside the shim (the
//! real runtime calling back into an exported name, or the shim's own CUDA
//! calls) passes straight through. A panic inside the shim is caught, logged,
//! and the call is passed through to CUDA instead: the job never dies of it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}

/// Runs `body` once per outermost hooked call; `passthrough` (the real
/// function) otherwise, or when `body` panics.
pub fn hooked<R>(name: &str, body: impl FnOnce() -> R, passthrough: impl FnOnce() -> R) -> R {
    // During thread teardown the thread-local may be gone: pass through then.
    let entered = INSIDE
        .try_with(|inside| !inside.replace(true))
        .unwrap_or(false);
    if !entered {
        return passthrough();
    }
    let _leave = Leave;
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => {
            error!("internal error in the {name} hook; the call goes to CUDA unchanged");
            passthrough()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_calls_pass_through() {
        let outer = hooked(
            "outer",
            || hooked("inner", || "inner body", || "inner passthrough"),
            || "outer passthrough",
        );
        assert_eq!(outer, "inner passthrough");
        // The guard is released afterwards.
        assert_eq!(hooked("again", || 1, || 2), 1);
    }

    #[test]
    fn a_panic_becomes_a_passthrough() {
        std::panic::set_hook(Box::new(|_| {}));
        let result = hooked("boom", || -> i32 { panic!("boom") }, || 7);
        let _ = std::panic::take_hook();
        assert_eq!(result, 7);
        assert_eq!(hooked("after", || 1, || 2), 1);
    }
}
