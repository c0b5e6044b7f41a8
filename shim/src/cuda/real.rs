//! The real CUDA functions, resolved on first use from the loaded runtime
//! and driver (and the math libraries), one typed entry per function of
//! [`super::functions`]. A missing one answers "not supported" in its
//! library's codes (`cudaErrorNotSupported` for CUDA's) and says so once
//! in the log.
//!
//! The real twin of each hooked function also notes its result for the hook
//! that is running ([`begin_hook`], [`twin_result`]): a hook whose body
//! fails after the real call was made must hand back that call's result,
//! never make it a second time (a second allocation, or a double free).
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};

use cudart_sys::*;

/// A real function the loaded runtime does not have: "not supported", in
/// the status codes of the library it belongs to.
pub fn missing(name: &'static str) -> cudaError_t {
    static SAID: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let first = {
        let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = !said.contains(&name);
        if first {
            said.push(name);
        }
        first
    };
    match cudart_sys::library_of(name) {
        Some(library) => {
            if first {
                warn!("{name} is not available in the loaded {library}");
            }
            if name.starts_with("cudnn") {
                CUDNN_STATUS_NOT_SUPPORTED
            } else {
                CUBLAS_STATUS_NOT_SUPPORTED
            }
        }
        None => {
            if first {
                warn!("{name} is not available in the loaded CUDA runtime or driver");
            }
            cudaErrorNotSupported
        }
    }
}

/// cuBLAS's and cuDNN's own "not supported".
const CUBLAS_STATUS_NOT_SUPPORTED: c_int = 15;
const CUDNN_STATUS_NOT_SUPPORTED: c_int = 3000;

thread_local! {
    /// The hook running on this thread, and what its real twin returned.
    static RUNNING: Cell<(&'static str, Option<c_int>)> = const { Cell::new(("", None)) };
    /// Whether this thread is inside a hook: calls that reach the exports
    /// meanwhile (CUDA calling back into them, the shim's own calls) pass
    /// straight through.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Enters a hook: false if the thread is inside one already (or its
/// thread-locals are gone, during its teardown), and then it must pass
/// through.
pub fn enter_hook() -> bool {
    INSIDE
        .try_with(|inside| !inside.replace(true))
        .unwrap_or(false)
}

pub fn leave_hook() {
    let _ = INSIDE.try_with(|inside| inside.set(false));
}

/// Runs `call` (a hook's real twin) as if outside the hook, so that the
/// hooked calls it makes (a library's own kernel launches) are handled as
/// the job's own; the hook's state is put back afterwards.
pub fn outside_hook<R>(call: impl FnOnce() -> R) -> R {
    let running = RUNNING.try_with(|running| running.get()).ok();
    let was_inside = INSIDE
        .try_with(|inside| inside.replace(false))
        .unwrap_or(false);
    let result = call();
    let _ = INSIDE.try_with(|inside| inside.set(was_inside));
    // The twin notes its answer after the call returns, so after any inner
    // hook's; keep what it noted for this hook.
    if let Some((name, _)) = running {
        let _ = RUNNING.try_with(|now| {
            let noted = if now.get().0 == name {
                now.get().1
            } else {
                None
            };
            now.set((name, noted));
        });
    }
    result
}

/// Called by the guard as hook `name` begins.
pub fn begin_hook(name: &'static str) {
    let _ = RUNNING.try_with(|running| running.set((name, None)));
}

/// What the real twin of the running hook returned, if it was called.
pub fn twin_result() -> Option<c_int> {
    RUNNING.try_with(|running| running.get().1).ok().flatten()
}

/// Whether `name` is the running hook's twin.
fn is_twin(name: &'static str) -> bool {
    RUNNING
        .try_with(|running| running.get().0 == name)
        .unwrap_or(false)
}

/// Notes `rc` as the running hook's twin's answer.
fn note(name: &'static str, rc: c_int) {
    let _ = RUNNING.try_with(|running| running.set((name, Some(rc))));
}

/// A kernel launch (or any call naming a function) that the first runtime
/// refused as not its own may belong to another runtime loaded in the
/// process (an extension built for another CUDA version): the same call,
/// made to each other runtime in turn, until one takes it. The first
/// answer that is not `cudaErrorInvalidDeviceFunction`, if any.
fn in_other_runtimes<F: Copy>(function: &Function<F>, call: impl Fn(F) -> c_int) -> Option<c_int> {
    let name = function.name();
    if !(name.starts_with("cuda") || name.starts_with("__cuda")) {
        return None;
    }
    // The last error is each runtime's own: 98 there is a refused launch's
    // error to read (or clear) where it happened, never another runtime's.
    if matches!(name, "cudaPeekAtLastError" | "cudaGetLastError") {
        return None;
    }
    let name = std::ffi::CString::new(name).ok()?;
    cudart_sys::in_other_runtimes(&name)
        .into_iter()
        .filter_map(|address| Function::<F>::at(address))
        .map(call)
        .find(|rc| *rc != cudaErrorInvalidDeviceFunction)
}

/// A function of the real runtime or driver, resolved on first use;
/// `$twin`: it is a hook's real twin, whose result is noted.
macro_rules! real_fn {
    ($twin:literal $name:ident ( $($arg:ident : $ty:ty),* )) => {
        pub unsafe fn $name($($arg: $ty),*) -> cudaError_t {
            // Asked before the call: a library's twin runs inner hooks.
            let twin = $twin && is_twin(stringify!($name));
            if twin && crate::config::panics_at(concat!("before-real:", stringify!($name))) {
                // Once: the call then passed on unread is this one too.
                static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                if !FIRED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    panic!("a panic before the real {}, as the tests ask", stringify!($name));
                }
            }
            static FUNCTION: Function<unsafe extern "C" fn($($ty),*) -> cudaError_t> =
                Function::new(
                    // SAFETY: the literal ends in its only NUL.
                    unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) });
            let timer = crate::cuda::host_costs::cuda_began(twin);
            let rc = match FUNCTION.get() {
                // SAFETY: the symbol is the function of this signature,
                // called with the caller's arguments.
                Some(f) => unsafe { f($($arg),*) },
                None => missing(stringify!($name)),
            };
            crate::cuda::host_costs::cuda_ended(timer, stringify!($name), twin);
            let rc = if rc == cudaErrorInvalidDeviceFunction {
                // SAFETY: the same function of another loaded runtime,
                // with the same arguments (which the first one refused).
                in_other_runtimes(&FUNCTION, |f: unsafe extern "C" fn($($ty),*) -> cudaError_t| unsafe { f($($arg),*) })
                    .unwrap_or(rc)
            } else {
                rc
            };
            if twin {
                note(stringify!($name), rc);
                if crate::config::panics_at("after-real") {
                    panic!("a panic after the real {}, as the tests ask", stringify!($name));
                }
            }
            rc
        }
    };
}

macro_rules! real_table {
    (
        hooked { $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ); )* }
        lookups { $( fn $lname:ident ( $($larg:ident : $lty:ty),* $(,)? ); )* }
        real_only { $( fn $rname:ident ( $($rarg:ident : $rty:ty),* $(,)? ); )* }
    ) => {
        $( real_fn!(true $name($($arg: $ty),*)); )*
        $( real_fn!(true $lname($($larg: $lty),*)); )*
        $( real_fn!(false $rname($($rarg: $rty),*)); )*
    };
}

super::functions::cuda_functions!(real_table);
