//! glibc's `dlsym`, found when the library loads, for the exported `dlsym`
//! ([`crate::exports`]) to hand lookups to.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `dlsym`, found by version so that looking it up does not come
/// back here; 0 until found.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Finds glibc's `dlsym` (called when the library loads, and again here if
/// a lookup came before that).
pub fn resolve_real() -> usize {
    let known = REAL_DLSYM.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
        // SAFETY: dlvsym with NUL-terminated strings.
        let found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !found.is_null() {
            REAL_DLSYM.store(found as usize, Ordering::Release);
            return found as usize;
        }
    }
    0
}
