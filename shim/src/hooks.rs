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

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use cudart_sys::*;

pub use vramshare_common::event::Api;

use crate::placement::Backend;
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

        /// The exported hook of exactly this name, if there is one.
        pub fn hook_named(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($name).as_bytes() {
                    return Some($name as *const () as *mut c_void);
                }
            )*
            None
        }

        /// For each hook: the real function's address and the hook's, so
        /// that a function pointer handed out by the driver's own lookup
        /// (`cuGetProcAddress` and the runtime's entry points) can be swapped
        /// for the hook of exactly that function.
        fn hook_addresses() -> Vec<(usize, usize)> {
            let mut pairs = Vec::new();
            // Only libraries already loaded: finding the runtime must not
            // load it into a program that uses the driver alone.
            let runtime_loaded = cudart_sys::loaded_object_named("libcudart.so").is_some();
            $(
                // SAFETY: the literal ends in its only NUL.
                let name = unsafe { std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) };
                let is_runtime = stringify!($name).starts_with("cuda");
                if let Some(real) = (runtime_loaded || !is_runtime).then(|| cudart_sys::lookup(name)).flatten() {
                    pairs.push((real as usize, $name as *const () as usize));
                }
            )*
            pairs
        }

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
            policy::malloc_managed(Api::cudaMallocManaged, ptr, size, flags, |out| real::cudaMallocManaged(out, size, flags));
        fn cudaMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) =>
            policy::malloc_pitch(Api::cudaMallocPitch, ptr, pitch, width, height, || real::cudaMallocPitch(ptr, pitch, width, height));
        fn cudaMalloc3D(pitched: *mut cudaPitchedPtr, extent: cudaExtent) =>
            policy::malloc_3d(pitched, extent);
        fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t) =>
            policy::malloc_pooled(Api::cudaMallocAsync, ptr, size, std::ptr::null_mut(), |out| real::cudaMallocAsync(out, size, stream));
        fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: cudaStream_t) =>
            policy::malloc_pooled(Api::cudaMallocAsync_ptsz, ptr, size, std::ptr::null_mut(), |out| real::cudaMallocAsync_ptsz(out, size, stream));
        fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t) =>
            policy::malloc_pooled(Api::cudaMallocFromPoolAsync, ptr, size, pool, |out| real::cudaMallocFromPoolAsync(out, size, pool, stream));
        fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: cudaMemPool_t, stream: cudaStream_t) =>
            policy::malloc_pooled(Api::cudaMallocFromPoolAsync_ptsz, ptr, size, pool, |out| real::cudaMallocFromPoolAsync_ptsz(out, size, pool, stream));
        fn cudaFree(ptr: *mut c_void) =>
            policy::free(Api::cudaFree, ptr, |p| real::cudaFree(p));
        fn cudaFreeAsync(ptr: *mut c_void, stream: cudaStream_t) =>
            policy::free(Api::cudaFreeAsync, ptr, |p| real::cudaFreeAsync(p, stream));
        fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: cudaStream_t) =>
            policy::free(Api::cudaFreeAsync_ptsz, ptr, |p| real::cudaFreeAsync_ptsz(p, stream));
        fn cudaMemGetInfo(free: *mut usize, total: *mut usize) =>
            policy::mem_get_info(Backend::Runtime, free, total, |f, t| real::cudaMemGetInfo(f, t));

        // The driver API, for programs that allocate through libcuda.so.1
        // directly. A device address (CUdeviceptr) is a 64-bit integer,
        // the size of a pointer, so it goes through the same policy.
        fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, size: usize) =>
            policy::malloc(Api::cuMemAlloc_v2, ptr.cast(), size, |out| real::cuMemAlloc_v2(out.cast(), size));
        fn cuMemAllocManaged(ptr: *mut CUdeviceptr, size: usize, flags: c_uint) =>
            policy::malloc_managed(Api::cuMemAllocManaged, ptr.cast(), size, flags, |out| real::cuMemAllocManaged(out.cast(), size, flags));
        fn cuMemAllocPitch_v2(ptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element: c_uint) =>
            policy::malloc_pitch(Api::cuMemAllocPitch_v2, ptr.cast(), pitch, width, height, || real::cuMemAllocPitch_v2(ptr, pitch, width, height, element));
        fn cuMemAllocAsync(ptr: *mut CUdeviceptr, size: usize, stream: CUstream) =>
            policy::malloc_pooled(Api::cuMemAllocAsync, ptr.cast(), size, std::ptr::null_mut(), |out| real::cuMemAllocAsync(out.cast(), size, stream));
        fn cuMemAllocAsync_ptsz(ptr: *mut CUdeviceptr, size: usize, stream: CUstream) =>
            policy::malloc_pooled(Api::cuMemAllocAsync_ptsz, ptr.cast(), size, std::ptr::null_mut(), |out| real::cuMemAllocAsync_ptsz(out.cast(), size, stream));
        fn cuMemAllocFromPoolAsync(ptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream) =>
            policy::malloc_pooled(Api::cuMemAllocFromPoolAsync, ptr.cast(), size, pool, |out| real::cuMemAllocFromPoolAsync(out.cast(), size, pool, stream));
        fn cuMemAllocFromPoolAsync_ptsz(ptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream) =>
            policy::malloc_pooled(Api::cuMemAllocFromPoolAsync_ptsz, ptr.cast(), size, pool, |out| real::cuMemAllocFromPoolAsync_ptsz(out.cast(), size, pool, stream));
        fn cuMemFree_v2(ptr: CUdeviceptr) =>
            policy::free(Api::cuMemFree_v2, ptr as *mut c_void, |p| real::cuMemFree_v2(p as CUdeviceptr));
        fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) =>
            policy::free(Api::cuMemFreeAsync, ptr as *mut c_void, |p| real::cuMemFreeAsync(p as CUdeviceptr, stream));
        fn cuMemFreeAsync_ptsz(ptr: CUdeviceptr, stream: CUstream) =>
            policy::free(Api::cuMemFreeAsync_ptsz, ptr as *mut c_void, |p| real::cuMemFreeAsync_ptsz(p as CUdeviceptr, stream));
        fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) =>
            policy::mem_get_info(Backend::Driver, free, total, |f, t| real::cuMemGetInfo_v2(f, t));

        // Physical memory of the virtual memory API (PyTorch's expandable
        // segments): counted from creation until it is both released and
        // unmapped, as the driver frees it. Reserving address space and
        // granting access change no count: those calls are not hooked.
        fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) =>
            policy::mem_create(handle, size, prop, |prop| real::cuMemCreate(handle, size, prop, flags));
        fn cuMemRelease(handle: CUmemGenericAllocationHandle) =>
            policy::mem_release(handle, || real::cuMemRelease(handle));
        fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: u64) =>
            policy::mem_map(ptr, size, handle, || real::cuMemMap(ptr, size, offset, handle, flags));
        fn cuMemUnmap(ptr: CUdeviceptr, size: usize) =>
            policy::mem_unmap(ptr, size, || real::cuMemUnmap(ptr, size));

        // Every way a program fetches driver functions by name: the pointer
        // handed back is swapped for the hook when it is a hooked function.
        fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) =>
            swap_for_hook(real::cuGetProcAddress(symbol, pfn, version, flags), pfn);
        fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) =>
            swap_for_hook(real::cuGetProcAddress_v2(symbol, pfn, version, flags, status), pfn);
        fn cudaGetDriverEntryPoint(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int) =>
            swap_for_hook(real::cudaGetDriverEntryPoint(symbol, pfn, flags, status), pfn);
        fn cudaGetDriverEntryPoint_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int) =>
            swap_for_hook(real::cudaGetDriverEntryPoint_ptsz(symbol, pfn, flags, status), pfn);
        fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_int) =>
            swap_for_hook(real::cudaGetDriverEntryPointByVersion(symbol, pfn, version, flags, status), pfn);
        fn cudaGetDriverEntryPointByVersion_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_int) =>
            swap_for_hook(real::cudaGetDriverEntryPointByVersion_ptsz(symbol, pfn, version, flags, status), pfn);
    }
    real_only {
        fn cudaGetDevice(device: *mut c_int);
        fn cudaGetDeviceCount(count: *mut c_int);
        fn cuDeviceGetCount(count: *mut c_int);
        fn cudaSetDevice(device: c_int);
        fn cudaRuntimeGetVersion(version: *mut c_int);
        fn cudaStreamCreateWithFlags(stream: *mut cudaStream_t, flags: c_uint);
        fn cuCtxGetDevice(device: *mut CUdevice);
        fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: CUdevice);
        fn cuStreamCreate(stream: *mut CUstream, flags: c_uint);
        fn cudaDeviceGetMemPool(pool: *mut cudaMemPool_t, device: c_int);
        fn cudaMemPoolGetAttribute(pool: cudaMemPool_t, attribute: c_int, value: *mut c_void);
        fn cudaMemPoolTrimTo(pool: cudaMemPool_t, keep: usize);
        fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, device: CUdevice);
        fn cuMemPoolGetAttribute(pool: CUmemoryPool, attribute: c_int, value: *mut c_void);
        fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize);
    }
}

/// After a successful lookup, replaces a real function's address with its
/// hook's. Anything else (other functions, other versions of a hooked name,
/// failures) is handed back as the driver gave it.
///
/// # Safety
/// `pfn` is the caller's pointer, as the driver would receive it.
unsafe fn swap_for_hook(rc: c_int, pfn: *mut *mut c_void) -> c_int {
    static HOOKS: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    if rc != CUDA_SUCCESS || pfn.is_null() {
        return rc;
    }
    let found = unsafe { *pfn } as usize;
    if let Some((_, hook)) = HOOKS
        .get_or_init(hook_addresses)
        .iter()
        .find(|(real, _)| *real == found)
    {
        unsafe { *pfn = *hook as *mut c_void };
    }
    rc
}
