//! The top of the shim: the exported functions the dynamic linker binds a
//! job to (through `LD_PRELOAD`), one per hooked function of
//! [`crate::cuda::functions`], each calling its handler
//! ([`crate::policy::handlers`]) inside the [`guard`]; and the lookups
//! (`cuGetProcAddress`, the runtime's driver entry points, and `dlsym` on
//! x86-64) that hand the same hooks out by name.
// CUDA's signatures are as they are: some take eleven arguments.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;
use crate::policy::handlers;

#[cfg(all(target_arch = "x86_64", not(test)))]
pub mod dlsym;
mod guard;
mod lookups;

macro_rules! exports {
    (
        hooked { $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ); )* }
        lookups { $( fn $lname:ident ( $($larg:ident : $lty:ty),* $(,)? ); )* }
        real_only { $( fn $rname:ident ( $($rarg:ident : $rty:ty),* $(,)? ); )* }
    ) => {
        /// Every exported hook, by its name in the trace (which makes a hook
        /// without an `Api` variant of its name fail to compile).
        #[allow(dead_code)]
        pub const HOOKED: &[Api] = &[ $( Api::$name, )* $( Api::$lname, )* ];

        /// The exported hook of exactly this name, if there is one.
        pub fn hook_named(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($name).as_bytes() {
                    return Some($name as *const () as *mut c_void);
                }
            )*
            $(
                if name == stringify!($lname).as_bytes() {
                    return Some($lname as *const () as *mut c_void);
                }
            )*
            None
        }

        /// For each hook: its name, the real function's address (when its
        /// library is loaded) and the hook's.
        fn hook_addresses() -> Vec<(&'static str, Option<usize>, usize)> {
            // Only libraries already loaded: finding the runtime must not
            // load it into a program that uses the driver alone.
            let runtime_loaded = cudart_sys::loaded_object_named("libcudart.so").is_some();
            let real = |name: &'static str| {
                let is_runtime = name.trim_start_matches('_').starts_with("cuda");
                let name = std::ffi::CString::new(name).ok()?;
                (runtime_loaded || !is_runtime)
                    .then(|| cudart_sys::lookup(&name))
                    .flatten()
                    .map(|address| address as usize)
            };
            vec![ $( (stringify!($name), real(stringify!($name)), $name as *const () as usize), )* ]
        }

        $(
            // Unit tests link this crate into a test binary: exporting CUDA's
            // names there would interpose on nothing useful, so only the
            // library build exports them.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> cudaError_t {
                guard::hooked(
                    stringify!($name),
                    // SAFETY: the caller's arguments, as CUDA would receive them.
                    || unsafe { handlers::$name($($arg),*) },
                    || unsafe { real::$name($($arg),*) },
                )
            }
        )*
        $(
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $lname($($larg: $lty),*) -> cudaError_t {
                guard::hooked(
                    stringify!($lname),
                    // SAFETY: the caller's arguments, as CUDA would receive them.
                    || unsafe { lookups::$lname($($larg),*) },
                    || unsafe { real::$lname($($larg),*) },
                )
            }
        )*
    };
}

crate::cuda::functions::cuda_functions!(exports);

/// Marks the beginning of a step of the job's loop, for the access profile
/// (`ctypes.CDLL(None).vramshare_step()` from Python, before each step):
/// from the first mark on, steps are the job's marks rather than found from
/// the repeating launch sequence. Without the shim loaded the name is
/// simply absent, so a job looks it up rather than links to it.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn vramshare_step() {
    guard::wall(
        "vramshare_step",
        || {
            let state = crate::state::state();
            crate::cuda::host_costs::step_marked();
            let events = state.trace.as_ref().map(|trace| trace.recorded());
            state.access.mark_step(events);
            crate::policy::step_marked(state);
        },
        || None,
        || (),
    );
}
