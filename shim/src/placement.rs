//! Moving managed memory between host and device: the advise and prefetch
//! calls, in the form the loaded runtime expects.
//!
//! CUDA 13's `cudaMemAdvise` and `cudaMemPrefetchAsync` take a
//! `struct cudaMemLocation` by value; CUDA 12's take an `int device` (the host
//! is `cudaCpuDeviceId`). The same names, different ABIs: the shim asks
//! `cudaRuntimeGetVersion` once and casts the symbol to the matching type.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use cudart_sys::*;

use crate::hooks::real;
use crate::state::State;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Device(u32),
    Host,
}

impl Location {
    fn as_mem_location(self) -> cudaMemLocation {
        match self {
            Location::Device(d) => cudaMemLocation::device(d as c_int),
            Location::Host => cudaMemLocation::host(),
        }
    }
    fn as_device_id(self) -> c_int {
        match self {
            Location::Device(d) => d as c_int,
            Location::Host => cudaCpuDeviceId,
        }
    }
}

static ADVISE: Symbol = Symbol::new(c"cudaMemAdvise");
static PREFETCH: Symbol = Symbol::new(c"cudaMemPrefetchAsync");

/// The runtime's major version; CUDA 13's forms if it cannot be asked.
pub fn runtime_major(state: &State) -> i32 {
    let known = state.runtime_major.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    let mut version: c_int = 0;
    // SAFETY: writes the int we own.
    let rc = unsafe { real::cudaRuntimeGetVersion(&mut version) };
    let major = if rc == cudaSuccess && version > 0 {
        version / 1000
    } else {
        13
    };
    state.runtime_version.store(version, Ordering::Relaxed);
    state.runtime_major.store(major, Ordering::Relaxed);
    major
}

pub fn advise(
    state: &State,
    ptr: *mut c_void,
    size: usize,
    advice: cudaMemoryAdvise,
    to: Location,
) -> cudaError_t {
    let Some(f) = ADVISE.get() else {
        return crate::policy::missing("cudaMemAdvise");
    };
    // SAFETY: the symbol is cudaMemAdvise in the form of this runtime's version.
    unsafe {
        if runtime_major(state) >= 13 {
            let f: cudaMemAdvise_loc_fn = std::mem::transmute(f);
            f(ptr, size, advice, to.as_mem_location())
        } else {
            let f: cudaMemAdvise_int_fn = std::mem::transmute(f);
            f(ptr, size, advice, to.as_device_id())
        }
    }
}

pub fn prefetch(
    state: &State,
    ptr: *mut c_void,
    size: usize,
    to: Location,
    stream: cudaStream_t,
) -> cudaError_t {
    let Some(f) = PREFETCH.get() else {
        return crate::policy::missing("cudaMemPrefetchAsync");
    };
    // SAFETY: the symbol is cudaMemPrefetchAsync in the form of this runtime's version.
    unsafe {
        if runtime_major(state) >= 13 {
            let f: cudaMemPrefetchAsync_loc_fn = std::mem::transmute(f);
            f(ptr, size, to.as_mem_location(), 0, stream)
        } else {
            let f: cudaMemPrefetchAsync_int_fn = std::mem::transmute(f);
            f(ptr, size, to.as_device_id(), stream)
        }
    }
}

/// A spilled block: its pages live on the host, and the device reads them
/// over the link through its mappings instead of faulting them across.
pub fn place_on_host(state: &State, ptr: *mut c_void, size: usize, device: u32) -> cudaError_t {
    let rc = advise(
        state,
        ptr,
        size,
        cudaMemAdviseSetPreferredLocation,
        Location::Host,
    );
    let rc2 = advise(
        state,
        ptr,
        size,
        cudaMemAdviseSetAccessedBy,
        Location::Device(device),
    );
    first_error(rc, rc2)
}

/// A promoted block: it prefers its device, and its pages are moved there
/// asynchronously on the shim's own stream. Nothing waits for the move:
/// managed memory is coherent wherever it sits.
pub fn move_to_device(state: &State, ptr: *mut c_void, size: usize, device: u32) -> cudaError_t {
    let rc = advise(
        state,
        ptr,
        size,
        cudaMemAdviseSetPreferredLocation,
        Location::Device(device),
    );
    let stream = shim_stream(state, device);
    let rc2 = prefetch(state, ptr, size, Location::Device(device), stream);
    first_error(rc, rc2)
}

fn first_error(a: cudaError_t, b: cudaError_t) -> cudaError_t {
    if a != cudaSuccess {
        a
    } else {
        b
    }
}

/// The calling thread's current device.
pub fn current_device() -> Result<u32, cudaError_t> {
    let mut device: c_int = -1;
    // SAFETY: writes the int we own.
    let rc = unsafe { real::cudaGetDevice(&mut device) };
    if rc != cudaSuccess {
        return Err(rc);
    }
    u32::try_from(device)
        .ok()
        .filter(|d| (*d as usize) < crate::config::MAX_DEVICES)
        .ok_or(cudaErrorInvalidValue)
}

/// The shim's non-blocking stream on `device`, made once. Null (the default
/// stream) if it cannot be made.
fn shim_stream(state: &State, device: u32) -> cudaStream_t {
    let slot = &state.streams[device as usize];
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let previous = current_device().ok();
    let mut stream: cudaStream_t = std::ptr::null_mut();
    // SAFETY: plain runtime calls with values we own; the caller's current
    // device is put back before returning.
    unsafe {
        if previous != Some(device) {
            real::cudaSetDevice(device as c_int);
        }
        if real::cudaStreamCreateWithFlags(&mut stream, cudaStreamNonBlocking) != cudaSuccess {
            stream = std::ptr::null_mut();
        }
        if let Some(previous) = previous.filter(|p| *p != device) {
            real::cudaSetDevice(previous as c_int);
        }
    }
    if stream.is_null() {
        return stream;
    }
    match slot.compare_exchange(
        std::ptr::null_mut(),
        stream,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => stream,
        // Another thread made one first; ours stays unused (streams are cheap).
        Err(theirs) => theirs,
    }
}
