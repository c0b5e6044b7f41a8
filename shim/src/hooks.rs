//! The one list of hooked CUDA runtime functions.
//!
//! Each line of `hooks!` produces two things: the exported `extern "C"`
//! function that the dynamic linker binds the caller to (through
//! `LD_PRELOAD`), and the lazily resolved pointer to the real function in
//! [`real`]. The `real_only` lines are functions the shim calls but does
//! not intercept. A hook names itself in the trace as the [`Api`] variant of
//! its own name (shared with the command, in `vramshare-common`), so adding
//! a hook is one line here, its policy, and that variant.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_uint, c_void};

use cudart_sys::*;

pub use vramshare_common::event::Api;

use crate::policy;

/// A function of the real runtime, resolved on first use.
macro_rules! real_fn {
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        pub unsafe fn $name($($arg: $ty),*) -> cudaError_t {
            static SYMBOL: Symbol = Symbol::new(
                // SAFETY: the literal ends in its only NUL.
                unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) });
            match SYMBOL.get() {
                // SAFETY: the symbol is the runtime's function of this signature.
                Some(f) => unsafe {
                    let f: unsafe extern "C" fn($($ty),*) -> cudaError_t = std::mem::transmute(f);
                    f($($arg),*)
                },
                None => crate::policy::missing(stringify!($name)),
            }
        }
    };
}

macro_rules! hooks {
    (
        hooked { $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $body:expr; )* }
        real_only { $( fn $rname:ident ( $($rarg:ident : $rty:ty),* $(,)? ); )* }
    ) => {
        /// Every exported hook, by its name in the trace (which makes a hook
        /// without an `Api` variant of its name fail to compile).
        #[allow(dead_code)]
        pub const HOOKED: &[Api] = &[ $( Api::$name, )* ];

        /// The real runtime's functions, resolved on first use. A missing one
        /// answers `cudaErrorNotSupported` (and says so once in the log).
        pub mod real {
            use super::*;
            $( real_fn!($name($($arg: $ty),*)); )*
            $( real_fn!($rname($($rarg: $rty),*)); )*
        }

        $(
            // Unit tests link this crate into a test binary: exporting CUDA's
            // names there would interpose on nothing useful, so only the
            // library build exports them.
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> cudaError_t {
                crate::guard::hooked(
                    stringify!($name),
                    || unsafe { $body },
                    || unsafe { real::$name($($arg),*) },
                )
            }
        )*
    };
}

hooks! {
    hooked {
        fn cudaMalloc(ptr: *mut *mut c_void, size: usize) =>
            policy::malloc(Api::cudaMalloc, ptr, size, |out| real::cudaMalloc(out, size));
        fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) =>
            policy::malloc_managed(ptr, size, flags);
        fn cudaMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) =>
            policy::malloc_pitch(ptr, pitch, width, height);
        fn cudaMalloc3D(pitched: *mut cudaPitchedPtr, extent: cudaExtent) =>
            policy::malloc_3d(pitched, extent);
        fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t) =>
            policy::malloc(Api::cudaMallocAsync, ptr, size, |out| real::cudaMallocAsync(out, size, stream));
        fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t) =>
            policy::malloc(Api::cudaMallocAsync_ptsz, ptr, size, |out| real::cudaMallocAsync_ptsz(out, size, stream));
        fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t) =>
            policy::malloc(Api::cudaMallocFromPoolAsync, ptr, size, |out| real::cudaMallocFromPoolAsync(out, size, pool, stream));
        fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t) =>
            policy::malloc(Api::cudaMallocFromPoolAsync_ptsz, ptr, size, |out| real::cudaMallocFromPoolAsync_ptsz(out, size, pool, stream));
        fn cudaFree(ptr: *mut c_void) =>
            policy::free(Api::cudaFree, ptr, |p| real::cudaFree(p));
        fn cudaFreeAsync(ptr: *mut c_void, stream: cudaStream_t) =>
            policy::free(Api::cudaFreeAsync, ptr, |p| real::cudaFreeAsync(p, stream));
        fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: cudaStream_t) =>
            policy::free(Api::cudaFreeAsync_ptsz, ptr, |p| real::cudaFreeAsync_ptsz(p, stream));
        fn cudaMemGetInfo(free: *mut usize, total: *mut usize) =>
            policy::mem_get_info(free, total);
    }
    real_only {
        fn cudaGetDevice(device: *mut c_int);
        fn cudaSetDevice(device: c_int);
        fn cudaRuntimeGetVersion(version: *mut c_int);
        fn cudaStreamCreateWithFlags(stream: *mut cudaStream_t, flags: c_uint);
    }
}
