//! `dlsym`, so that a program that looks the CUDA functions up in a handle
//! of `libcuda.so.1` or `libcudart.so` (JAX/XLA, ctypes) gets the hooks.
//!
//! `dlsym` answers relative to its caller for `RTLD_NEXT` (and `RTLD_DEFAULT`
//! follows the caller's scope): glibc reads the caller from the return
//! address. So the exported `dlsym` is a few instructions that jump straight
//! to glibc's for those two handles, leaving the caller's return address in
//! place; only a lookup in an explicit handle comes into Rust, where its
//! answer may be swapped for the hook of the same name. The runtime's own
//! lookups in the driver are left alone (it calls the driver through them
//! from inside the hooks, which must reach the real functions), and so are
//! the shim's own (they happen inside a hook, where the guard passes them
//! through). x86-64 only. glibc's `dlsym` is found when the library loads;
//! a lookup made before that (by another library's constructor) is answered
//! from here, where `RTLD_NEXT` would be relative to the shim.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `dlsym`, found by version so that looking it up does not come
/// back here; 0 until found.
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

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

/// The exported `dlsym`: `RTLD_NEXT` (-1) and `RTLD_DEFAULT` (0) go straight
/// to glibc's with the caller's return address untouched; other handles (or
/// a lookup before glibc's is known) go to [`lookup_in_handle`] with the
/// caller's address as a third argument.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "cmp rdi, -1",
        "je 3f",
        "test rdi, rdi",
        "je 3f",
        "2:",
        "mov rdx, qword ptr [rsp]",
        "jmp {lookup}",
        "3:",
        "jmp rax",
        real = sym REAL_DLSYM,
        lookup = sym lookup_in_handle,
    )
}

/// A lookup in an explicit handle: glibc answers, then a CUDA function of
/// the real libraries is swapped for its hook.
unsafe extern "C" fn lookup_in_handle(
    handle: *mut c_void,
    symbol: *const c_char,
    caller: *const c_void,
) -> *mut c_void {
    let real = resolve_real();
    if real == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: glibc's dlsym, with the caller's arguments.
    let found = unsafe { std::mem::transmute::<usize, DlsymFn>(real)(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    crate::guard::hooked(
        "dlsym",
        || unsafe { hook_for(found, symbol, caller) }.unwrap_or(found),
        || found,
    )
}

/// The hook to hand back instead of `found`, if there is one.
unsafe fn hook_for(
    found: *mut c_void,
    symbol: *const c_char,
    caller: *const c_void,
) -> Option<*mut c_void> {
    // SAFETY: dlsym just accepted this name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !name.starts_with(b"cu") {
        return None;
    }
    let hook = crate::hooks::hook_named(name)?;
    let from_cuda = in_library(found, "libcuda.so.") || in_library(found, "libcudart.so");
    (from_cuda && !in_library(caller, "libcudart.so")).then_some(hook)
}

/// Whether `address` lies in a loaded object whose file name starts with `prefix`.
fn in_library(address: *const c_void, prefix: &str) -> bool {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info`; dli_fname is a NUL-terminated path when set.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    path.rsplit('/')
        .next()
        .is_some_and(|file| file.starts_with(prefix))
}
