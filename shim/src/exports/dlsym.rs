//! `dlsym`, so that a program that looks the CUDA functions up in a handle
//! of `libcuda.so.1` or `libcudart.so` (JAX/XLA, ctypes) gets the hooks.
//!
//! `dlsym` answers relative to its caller for `RTLD_NEXT` (and `RTLD_DEFAULT`
//! follows the caller's scope): glibc reads the caller from the return
//! address. So the exported `dlsym` is a few instructions that jump straight
//! to glibc's for those two handles, leaving the caller's return address in
//! place; only a lookup in an explicit handle comes into Rust, where its
//! answer is swapped for the hook of the same name, wherever the function
//! came from (the driver, or another interposer). The runtime's own
//! lookups in the driver are left alone (it calls the driver through them
//! from inside the hooks, which must reach the real functions), and so are
//! the shim's own (they happen inside a hook, where the guard passes them
//! through). x86-64 only. glibc's `dlsym` is found when the library loads;
//! a lookup made before that (by another library's constructor) is answered
//! from here, where `RTLD_NEXT` would be relative to the shim.

use std::ffi::{c_char, c_void, CStr};

use crate::cuda::dlsym::{resolve_real, DlsymFn, REAL_DLSYM};

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
    super::guard::wall(
        "dlsym",
        // SAFETY: the caller's arguments, which glibc has just accepted.
        || unsafe { hook_for(found, symbol, caller) }.unwrap_or(found),
        || None,
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
    // The math libraries look their own functions up in their parts (cuDNN's
    // libcudnn.so forwards cudnnBackendExecute to libcudnn_graph.so's): the
    // hook in its place would call the forwarder, which would call the hook.
    // Only the runtime's and driver's functions are swapped here.
    if std::str::from_utf8(name).map_or(true, |name| cudart_sys::library_of(name).is_some()) {
        return None;
    }
    let hook = super::hook_named(name)?;
    // By name, wherever the function came from (the driver, or another
    // interposer in front of it); but the runtime's own lookups in the
    // driver, and the shim's, must reach the real functions.
    let from_inside = in_library(caller, "libcudart.so") || same_object(caller, hook);
    (!from_inside && !same_object(found, hook)).then_some(hook)
}

/// Whether two addresses lie in the same loaded object.
fn same_object(a: *const c_void, b: *const c_void) -> bool {
    match (object_base(a), object_base(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn object_base(address: *const c_void) -> Option<usize> {
    // SAFETY: a zeroed Dl_info is valid for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    (unsafe { libc::dladdr(address, &mut info) } != 0).then_some(info.dli_fbase as usize)
}

/// Whether `address` lies in a loaded object whose file name starts with `prefix`.
fn in_library(address: *const c_void, prefix: &str) -> bool {
    // SAFETY: a zeroed Dl_info is valid for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info`.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dli_fname is a NUL-terminated path when set.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    path.rsplit('/')
        .next()
        .is_some_and(|file| file.starts_with(prefix))
}
