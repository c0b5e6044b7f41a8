//! The driver's lookups by name (`cuGetProcAddress` and the runtime's
//! `cudaGetDriverEntryPoint*`): a pointer handed back for a hooked function
//! is swapped for its hook.
//!
//! A pointer to the real function of a hook (what the driver's own lookup
//! hands out) is swapped for exactly that hook. Any other pointer for a
//! hooked name gets the hook chosen by the name asked for, with the version and the
//! per-thread default stream flag picking its form as the driver does
//! (`cuMemAlloc` at CUDA 3.2 or later is `cuMemAlloc_v2`; `cuMemAllocAsync`
//! with per-thread streams is `cuMemAllocAsync_ptsz`), not by the address
//! the driver gave: another interposer in front of the driver (a profiler,
//! a second shim), or a driver answering from a table of its own, hands out
//! addresses that are not the exported functions', and the job would then
//! bypass its quota. A name asked for at a version whose form is not
//! hooked (the 32-bit `cuMemAlloc` before 3.2) is handed back as it is.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use cudart_sys::*;

use crate::cuda::real;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`, and the runtime's
/// `cudaEnablePerThreadDefaultStream` (the same bit).
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`, `cudaEnableLegacyStream`.
const LEGACY_STREAM: u64 = 1;

/// The `_ptsz` lookups (code built with per-thread default streams) ask
/// for per-thread forms unless the flags name a stream mode themselves.
fn per_thread_by_default(flags: u64) -> u64 {
    if flags & (LEGACY_STREAM | PER_THREAD_DEFAULT_STREAM) == 0 {
        flags | PER_THREAD_DEFAULT_STREAM
    } else {
        flags
    }
}

/// Functions whose current form is `_v2`, from CUDA 3.2 (version 3020).
const V2_SINCE_3020: &[&str] = &[
    "cuMemAlloc",
    "cuMemFree",
    "cuMemGetInfo",
    "cuMemAllocPitch",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
    "cuMemcpyDtoD",
    "cuMemsetD8",
    "cuMemsetD32",
    "cuMemcpy2D",
    "cuMemcpy2DUnaligned",
    "cuMemcpy2DAsync",
    "cuMemcpy3D",
    "cuMemcpy3DAsync",
];
/// Synchronous functions with a `_ptds` form for the per-thread default
/// stream.
const PER_THREAD_SYNC_FORMS: &[&str] = &[
    "cuMemcpy",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
    "cuMemcpyDtoD",
    "cuMemsetD8",
    "cuMemsetD32",
    "cuMemcpy2D",
    "cuMemcpy2DUnaligned",
    "cuMemcpy3D",
];
/// Functions with a `_ptsz` form for the per-thread default stream.
const PER_THREAD_FORMS: &[&str] = &[
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuGraphInstantiateWithParams",
    "cuMemcpyAsync",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "cuMemcpy2DAsync",
    "cuMemcpy3DAsync",
    "cuIpcGetMemHandle",
];

/// The name of the form of `symbol` that a lookup at CUDA `version` (None:
/// the runtime's own, which is recent) with `per_thread` streams returns;
/// `None` where that form is one no hook has.
pub fn form_of(symbol: &str, version: Option<c_int>, per_thread: bool) -> Option<String> {
    let mut name = symbol.to_string();
    if V2_SINCE_3020.contains(&symbol) {
        if version.is_some_and(|v| v < 3020) {
            return None;
        }
        name.push_str("_v2");
    }
    // A name asked for with its `_v2` already (not the driver's way, but
    // possible) has its per-thread form all the same.
    let base = symbol.strip_suffix("_v2").unwrap_or(symbol);
    if per_thread && PER_THREAD_FORMS.contains(&base) {
        name.push_str("_ptsz");
    } else if per_thread && PER_THREAD_SYNC_FORMS.contains(&base) {
        name.push_str("_ptds");
    }
    Some(name)
}

/// After a successful lookup of `symbol`, puts the hook of the form asked
/// for in `*pfn`; anything else (unhooked functions, failures) is handed
/// back as the driver gave it.
///
/// # Safety
/// `symbol` and `pfn` are the caller's, as the driver received them.
unsafe fn swap_for_hook(
    rc: c_int,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    status: *const c_int,
    version: Option<c_int>,
    flags: u64,
) -> c_int {
    if rc != CUDA_SUCCESS || pfn.is_null() || symbol.is_null() {
        return rc;
    }
    // No function at that version (a null pointer, or a status saying so):
    // the caller checks for it, and a hook would say it exists.
    // SAFETY: the caller's pointers, as the driver wrote them.
    if unsafe { (*pfn).is_null() || (!status.is_null() && *status != 0) } {
        return rc;
    }
    // SAFETY: the driver just accepted this name.
    let Ok(symbol) = unsafe { CStr::from_ptr(symbol) }.to_str() else {
        return rc;
    };
    // The real function of a hook, as the driver's own lookup hands it out:
    // exactly its hook. Any other address: the hook of the form asked for.
    static HOOKS: OnceLock<Vec<(&'static str, Option<usize>, usize)>> = OnceLock::new();
    // SAFETY: the caller's pointer, which the driver just wrote.
    let found = unsafe { *pfn } as usize;
    let exact = HOOKS
        .get_or_init(super::hook_addresses)
        .iter()
        .find(|(_, real, _)| *real == Some(found))
        .map(|(_, _, hook)| *hook as *mut c_void);
    let per_thread = flags & PER_THREAD_DEFAULT_STREAM != 0;
    let hook = exact.or_else(|| {
        form_of(symbol, version, per_thread).and_then(|name| super::hook_named(name.as_bytes()))
    });
    if let Some(hook) = hook {
        // SAFETY: the caller's pointer, written as the driver wrote it.
        unsafe { *pfn = hook };
    }
    rc
}

pub unsafe fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the driver receives them.
    unsafe {
        let rc = real::cuGetProcAddress(symbol, pfn, version, flags);
        swap_for_hook(rc, symbol, pfn, std::ptr::null(), Some(version), flags)
    }
}

pub unsafe fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the driver receives them.
    unsafe {
        let rc = real::cuGetProcAddress_v2(symbol, pfn, version, flags, status);
        swap_for_hook(rc, symbol, pfn, status, Some(version), flags)
    }
}

pub unsafe fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the runtime receives them.
    unsafe {
        let rc = real::cudaGetDriverEntryPoint(symbol, pfn, flags, status);
        swap_for_hook(rc, symbol, pfn, status, None, flags)
    }
}

pub unsafe fn cudaGetDriverEntryPoint_ptsz(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the runtime receives them.
    unsafe {
        let rc = real::cudaGetDriverEntryPoint_ptsz(symbol, pfn, flags, status);
        swap_for_hook(rc, symbol, pfn, status, None, per_thread_by_default(flags))
    }
}

pub unsafe fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the runtime receives them.
    unsafe {
        let rc = real::cudaGetDriverEntryPointByVersion(symbol, pfn, version, flags, status);
        swap_for_hook(
            rc,
            symbol,
            pfn,
            status,
            c_int::try_from(version).ok(),
            flags,
        )
    }
}

pub unsafe fn cudaGetDriverEntryPointByVersion_ptsz(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as the runtime receives them.
    unsafe {
        let rc = real::cudaGetDriverEntryPointByVersion_ptsz(symbol, pfn, version, flags, status);
        let flags = per_thread_by_default(flags);
        swap_for_hook(
            rc,
            symbol,
            pfn,
            status,
            c_int::try_from(version).ok(),
            flags,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_the_one_the_driver_hands_out() {
        assert_eq!(
            form_of("cuMemAlloc", Some(12000), false).as_deref(),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            form_of("cuMemAlloc", None, true).as_deref(),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            form_of("cuMemAlloc", Some(3010), false),
            None,
            "the 32-bit form"
        );
        assert_eq!(
            form_of("cuMemAllocAsync", Some(12000), true).as_deref(),
            Some("cuMemAllocAsync_ptsz")
        );
        assert_eq!(
            form_of("cuMemFreeAsync", Some(12000), false).as_deref(),
            Some("cuMemFreeAsync")
        );
        assert_eq!(
            form_of("cuMemCreate", Some(12000), true).as_deref(),
            Some("cuMemCreate")
        );
        // A per-thread copy is asked for in its own form, never the legacy
        // stream's hook.
        assert_eq!(
            form_of("cuMemcpyAsync", Some(12000), true).as_deref(),
            Some("cuMemcpyAsync_ptsz")
        );
        assert!(super::super::hook_named(b"cuMemcpyAsync_ptsz").is_some());
        assert_eq!(
            form_of("cuGraphInstantiateWithParams", Some(12000), true).as_deref(),
            Some("cuGraphInstantiateWithParams_ptsz")
        );
        assert!(super::super::hook_named(b"cuGraphInstantiateWithParams_ptsz").is_some());
        // The synchronous ones: `_v2` since 3.2, `_ptds` per thread.
        assert_eq!(
            form_of("cuMemcpyHtoD", Some(12000), true).as_deref(),
            Some("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(
            form_of("cuMemcpy", Some(12000), true).as_deref(),
            Some("cuMemcpy_ptds")
        );
        assert_eq!(form_of("cuMemsetD8", Some(3010), false), None);
        assert!(super::super::hook_named(b"cuMemsetD32_v2_ptds").is_some());
        assert_eq!(
            form_of("cuMemcpy2DAsync", Some(12000), true).as_deref(),
            Some("cuMemcpy2DAsync_v2_ptsz")
        );
        assert!(super::super::hook_named(b"cuMemcpy2D_v2_ptds").is_some());
        assert!(super::super::hook_named(b"cuMemcpy2DAsync_v2_ptsz").is_some());
        assert_eq!(
            form_of("cuMemcpyHtoDAsync", None, false).as_deref(),
            Some("cuMemcpyHtoDAsync_v2")
        );
        assert!(super::super::hook_named(b"cuMemcpyHtoDAsync_v2").is_some());
        assert_eq!(
            form_of("cuMemcpyHtoDAsync_v2", None, true).as_deref(),
            Some("cuMemcpyHtoDAsync_v2_ptsz")
        );
        assert!(super::super::hook_named(b"cuMemAllocAsync_ptsz").is_some());
        assert!(super::super::hook_named(b"cuInit").is_none());
    }
}
