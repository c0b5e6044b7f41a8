//! The stream each cuBLAS and cuDNN handle runs its work on, as set
//! (`cublasSetStream_v2`, `cudnnSetStream`; PyTorch sets it each time it
//! hands a handle out). A library call carries its handle, not its stream,
//! and the work that used its operands last may still be running: with
//! the stream known, the call's work is ordered after that work on the
//! device ([`super::tier::uses::order`]); without it, the calling thread
//! waits for that work to finish first, which holds the job's next
//! launches back until the device has caught up.
//!
//! A handle destroyed is forgotten: one made later at its address runs on
//! the default stream until its stream is set, and its calls wait on the
//! calling thread meanwhile.

use std::ffi::{c_int, c_void};

use crate::state::{lock, State};

/// Sets `handle`'s stream to `stream` (null: the default stream) by
/// `call`, the library's own setter, and keeps it where the library
/// answered 0 (success). Forgotten first: if the call goes wrong, no stream
/// is trusted. The library's answer.
pub fn set(
    state: &State,
    handle: *mut c_void,
    stream: *mut c_void,
    call: impl FnOnce() -> c_int,
) -> c_int {
    forget(state, handle);
    let rc = call();
    if rc == 0 {
        lock(&state.library_streams).insert(handle as usize, stream as usize);
    }
    rc
}

/// Before `handle` is destroyed, or where setting its stream failed.
pub fn forget(state: &State, handle: *mut c_void) {
    lock(&state.library_streams).remove(&(handle as usize));
}

/// The stream set on `handle`, if it was.
pub fn of(state: &State, handle: *mut c_void) -> Option<usize> {
    lock(&state.library_streams)
        .get(&(handle as usize))
        .copied()
}
