//! libvramshare.so: put in front of an unchanged CUDA job with `LD_PRELOAD`,
//! it holds the process to a per-device memory quota (`VRAMSHARE_QUOTA`),
//! places what exceeds it in managed memory that lives on the host, brings it
//! back when room frees up, and traces every allocation.
//!
//! Layout, from the C boundary inwards:
//! - [`hooks`]: the one list of exported CUDA functions and their real twins;
//! - [`guard`]: re-entrancy and the panic wall around every hook;
//! - [`policy`]: quota, placement, promotion, `cudaMemGetInfo`;
//! - [`placement`]: the advise and prefetch calls for CUDA 12 and 13;
//! - [`stream_pools`]: what stream-ordered pools keep reserved counts too;
//! - [`ledger`]: every pointer handed out, and per-device counters;
//! - [`trace`], [`report`]: events, and the JSON written at exit;
//! - [`watcher`]: quotas changed by `vramshare quota set` while the job runs;
//! - [`config`], [`state`], [`log`]: variables, process state, stderr;
//! - `dlsym`: lookups in a CUDA library's handle hand back the hooks.

#[macro_use]
mod log;
pub mod config;
#[cfg(all(target_arch = "x86_64", not(test)))]
mod dlsym;
mod guard;
pub mod hooks;
mod ledger;
mod placement;
mod policy;
mod report;
mod state;
mod stream_pools;
mod trace;
mod watcher;

/// Runs when the library is loaded, before the program's `main`: reads and
/// checks the variables (a malformed one stops the job here, with status 2),
/// and nothing else.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        // glibc's dlsym, before anyone looks anything up through ours.
        #[cfg(all(target_arch = "x86_64", not(test)))]
        dlsym::resolve_real();
        let config = state::load_config();
        log::set_level(config.log);
        // Processes of one job that share a trace file (no `%p` in its name)
        // recognise each other by this variable, which the first sets.
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
    });
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
