//! Callers that keep a cache of freed blocks, and let go of it only when
//! `cudaMalloc` fails.
//!
//! PyTorch's caching allocator keeps every block a job frees reserved for
//! later tensors. When `cudaMalloc` fails it frees its unused blocks and asks
//! again for the same size. With spill `host`, an allocation over the quota
//! never fails, so the cache would keep device room that no tensor uses while
//! live tensors spill (measured: a job whose tensors peak at 15.3 GiB held
//! 19 GiB, and a 75% quota spilled 7.5 GiB where 3.8 GiB would have done).
//!
//! So when the code calling `cudaMalloc` is such an allocator, the first
//! request over the quota is answered with `cudaErrorMemoryAllocation`; its
//! retry of the same size on the same thread, made after the cache is
//! emptied, is placed as usual (on the device if it now fits, else spilled).
//! Any other caller is never refused with spill `host`.

use std::cell::Cell;
use std::ffi::{c_void, CStr};

/// File names (without the version suffix) of the libraries whose calls to
/// `cudaMalloc` are retried after a failure.
const CACHING_ALLOCATORS: &[&str] = &["libc10_cuda.so"];

thread_local! {
    /// The last request refused on this thread: (device, bytes).
    static REFUSED: Cell<Option<(u32, u64)>> = const { Cell::new(None) };
}

/// Whether to answer this over-quota request with out-of-memory, so that the
/// caller empties its cache and retries.
pub fn refuse_first_try(device: u32, size: u64) -> bool {
    if REFUSED.with(Cell::take) == Some((device, size)) {
        // The retry: the caller has let go of what it could.
        return false;
    }
    if !caller_retries() {
        return false;
    }
    REFUSED.with(|r| r.set(Some((device, size))));
    true
}

/// A request placed on the device: a later one of the same size is no retry.
pub fn placed() {
    REFUSED.with(|r| r.set(None));
}

/// Whether the first code outside this library on the call stack belongs to
/// one of [`CACHING_ALLOCATORS`].
fn caller_retries() -> bool {
    let mut frames = [std::ptr::null_mut::<c_void>(); 24];
    // SAFETY: backtrace writes at most `frames.len()` addresses.
    let depth = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as i32) };
    let own_base = object_of(caller_retries as *const c_void).map(|(base, _)| base);
    for &address in frames.iter().take(depth.max(0) as usize) {
        // A return address points just past the call: look one byte back.
        let Some((base, name)) = object_of((address as *const u8).wrapping_sub(1).cast()) else {
            return false;
        };
        if Some(base) == own_base {
            continue;
        }
        let file = name.rsplit('/').next().unwrap_or(&name);
        return CACHING_ALLOCATORS.iter().any(|a| file.starts_with(a));
    }
    false
}

/// The base address and path of the loaded object holding `address`.
fn object_of(address: *const c_void) -> Option<(usize, String)> {
    // SAFETY: dladdr only reads the loader's tables; Dl_info is plain data.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some((info.dli_fbase as usize, name.to_string_lossy().into_owned()))
}
