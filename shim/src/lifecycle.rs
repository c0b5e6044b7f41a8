//! The process's life as the shim sees it: loading (the constructor), the
//! first hooked calls (the panic hook, the shim's thread), `fork`, and exit.
//! Every per-process flag lives here, so that a forked child resets them
//! all in one place.
//!
//! Exit hands the registry slot and the pool's share back once; from then
//! on every hook passes straight through to CUDA, since a `cudaFree` that
//! runs later (a static destructor, a handler registered with `atexit`
//! before the library's) must not take the pool's count down a second time
//! or touch a registry slot another process may have taken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::state::{self, report};
use crate::{config, cuda, log, watcher};

/// Set once the process's exit handler has run.
static EXITED: AtomicBool = AtomicBool::new(false);
/// Set once the shim's thread is started in this process (reset in a
/// forked child, which has no thread of its own yet).
static THREAD: AtomicBool = AtomicBool::new(false);
static PROCESS_HOOKS: Once = Once::new();

/// Runs when the library is loaded, before the program's `main`: reads and
/// checks the variables (a malformed one stops the job here, with status 2),
/// and registers the fork handler; nothing of CUDA.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        // glibc's dlsym, before anyone looks anything up through ours.
        #[cfg(all(target_arch = "x86_64", not(test)))]
        crate::cuda::dlsym::resolve_real();
        let config = state::load_config();
        log::set_level(config.log);
        mark_job(config);
        // From the start, so that a fork at any moment (even while the
        // first state is being made) leaves the child its own.
        // SAFETY: registering a plain extern "C" function that never unwinds.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

/// Processes of one job that share a trace file (no `%p` in its name)
/// recognise each other by a variable, which the first sets.
fn mark_job(config: &config::Config) {
    if config.trace.as_deref().is_some_and(|t| !t.contains("%p"))
        && std::env::var_os(report::JOB_VARIABLE).is_none()
    {
        let job = format!(
            "{}-{}",
            std::process::id(),
            vramshare_common::process::monotonic_ns()
        );
        if let (Ok(name), Ok(value)) = (
            std::ffi::CString::new(report::JOB_VARIABLE),
            std::ffi::CString::new(job),
        ) {
            // SAFETY: the constructor runs before any thread of the program.
            unsafe { libc::setenv(name.as_ptr(), value.as_ptr(), 0) };
        }
    }
}

/// Whether the process has exited (its exit handler ran): hooks then pass
/// straight through.
pub fn exited() -> bool {
    EXITED.load(Ordering::Acquire)
}

/// After each hooked call that did the shim's work: once the process has a
/// state, its panics are logged through the shim, and once it is listed in
/// the registry, the shim's thread runs.
pub fn after_call() {
    if THREAD.load(Ordering::Relaxed) {
        return;
    }
    let Some(state) = state::started() else {
        return;
    };
    PROCESS_HOOKS.call_once(install_process_hooks);
    if state.listed() && !THREAD.swap(true, Ordering::AcqRel) {
        let spawned = std::thread::Builder::new()
            .name("vramshare-quota".into())
            .spawn(watcher::watch);
        if let Err(error) = spawned {
            warn!("cannot start the thread that applies quota changes ({error}); they apply at the next allocation");
        }
    }
}

/// With the first state: the exit handler, and the panic hook.
/// The exit handler is registered once a hooked call has reached CUDA,
/// after the runtime's own, so that it runs (and stops the shim's thread)
/// before the runtime is torn down.
fn install_process_hooks() {
    // SAFETY: registering plain extern "C" functions that never unwind.
    unsafe { libc::atexit(at_exit) };
    // A panic inside the shim is reported through the shim's log, once, in
    // one line; the guard then hands the call to CUDA.
    std::panic::set_hook(Box::new(|info| error!("{info}")));
}

extern "C" fn after_fork_in_child() {
    state::forget_after_fork();
    cuda::backend::forget_streams();
    crate::policy::forget_copiers_after_fork();
    // The parent's thread did not come along: the child starts its own.
    THREAD.store(false, Ordering::Release);
}

extern "C" fn at_exit() {
    watcher::EXITING.store(true, Ordering::Release);
    // Before the slot is given back: another thread's call from now on
    // passes straight through, touching neither the slot nor the pool.
    EXITED.store(true, Ordering::Release);
    // Nothing here may take the job down: a panic is logged and dropped.
    let _ = std::panic::catch_unwind(|| {
        if config::panics_at("exit") {
            panic!("a panic in the exit handler, as the tests ask");
        }
        if let Some(state) = state::started() {
            // The mover thread begins no move from now on, and finishes
            // those under way before CUDA is torn down.
            let moves = std::time::Duration::from_secs(1);
            state.tier.outgoing.close(&state.ledger, moves);
            report::write_trace_at_exit(state);
            state.give_back();
        }
    });
}
