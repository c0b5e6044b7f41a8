//! What every hook does around its body: a per-thread re-entrancy guard and a
//! wall that no panic crosses.
//!
//! A call that arrives while the same thread is already inside the shim (the
//! real runtime calling back into an exported name, or the shim's own CUDA
//! calls), or after the process's exit handler ran, passes straight through.
//! A panic inside the shim is caught and logged, and the call is passed
//! through to CUDA instead, unless the hook's real call was already made:
//! then its result stands (made twice, it would allocate or free twice). The
//! job never dies of it.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::cuda::host_costs;
use crate::cuda::real;

struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        real::leave_hook();
    }
}

/// A CUDA hook: runs `body` once per outermost hooked call; `passthrough`
/// (the real function) otherwise, or when `body` panics before the real
/// call was made.
pub fn hooked(
    name: &'static str,
    body: impl FnOnce() -> c_int,
    passthrough: impl FnOnce() -> c_int,
) -> c_int {
    let after_panic = || {
        let rc = real::twin_result()?;
        error!("internal error in the {name} hook, after CUDA's own call: its answer {rc} stands");
        Some(rc)
    };
    wall(name, body, after_panic, passthrough)
}

/// The guard itself: `body` once per outermost hooked call, while the
/// process runs; `passthrough` otherwise, or when `body` panics and
/// `after_panic` has no answer of its own.
pub fn wall<R>(
    name: &'static str,
    body: impl FnOnce() -> R,
    after_panic: impl FnOnce() -> Option<R>,
    passthrough: impl FnOnce() -> R,
) -> R {
    if crate::lifecycle::exited() {
        return passthrough();
    }
    if !real::enter_hook() {
        return passthrough();
    }
    let _leave = Leave;
    real::begin_hook(name);
    // The counting never panics; caught all the same, as all the shim's
    // work in a hook is.
    let began = catch_unwind(|| host_costs::hook_began(name)).ok().flatten();
    let result = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => match after_panic() {
            Some(result) => result,
            None => {
                error!("internal error in the {name} hook; the call goes to CUDA unchanged");
                // Unread by the shim, the call may touch any block; no
                // move begins until it is passed on.
                let _inside = catch_unwind(crate::policy::unknown_call).ok().flatten();
                passthrough()
            }
        },
    };
    let _ = catch_unwind(crate::lifecycle::after_call);
    let _ = catch_unwind(AssertUnwindSafe(|| host_costs::hook_ended(began)));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_calls_pass_through() {
        let outer = wall(
            "outer",
            || wall("inner", || "inner body", || None, || "inner passthrough"),
            || None,
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

    #[test]
    fn a_panic_after_the_real_call_keeps_its_answer() {
        std::panic::set_hook(Box::new(|_| {}));
        let mut real_calls = 0;
        let result = hooked(
            "cudaFree",
            || {
                // SAFETY: the fake-free twin of a hook, as a handler calls it.
                let _ = unsafe { real::cudaFree(std::ptr::null_mut()) };
                panic!("after the real call")
            },
            || {
                real_calls += 1;
                0
            },
        );
        let _ = std::panic::take_hook();
        assert_eq!(real_calls, 0, "the real call is not made a second time");
        assert_eq!(
            result,
            cudart_sys::cudaErrorNotSupported,
            "its answer stands"
        );
    }
}
