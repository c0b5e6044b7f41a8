//! The calls the shim makes on its own account, through the API that made a
//! block ([`Backend`]): device queries, managed memory, and moving it between
//! host and device with the advise and prefetch calls, in the form the
//! loaded library expects, on the shim's own streams.
//!
//! CUDA 13's `cudaMemAdvise` and `cudaMemPrefetchAsync` take a
//! `struct cudaMemLocation` by value; CUDA 12's take an `int device` (the host
//! is `cudaCpuDeviceId`). The same names, different ABIs: the shim asks
//! `cudaRuntimeGetVersion` once and casts the symbol to the matching type.
//! The driver names its location forms `_v2` (`cuMemAdvise_v2`), so there
//! the symbol that exists decides.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use cudart_sys::*;
use vramshare_common::event::Api;

use super::real::{self, missing};
use crate::config::{Device, MAX_DEVICES};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Device(Device),
    Host,
}

impl Location {
    fn as_mem_location(self) -> cudaMemLocation {
        match self {
            Location::Device(d) => cudaMemLocation::device(d.number() as c_int),
            Location::Host => cudaMemLocation::host(),
        }
    }
    fn as_device_id(self) -> c_int {
        match self {
            Location::Device(d) => d.number() as c_int,
            Location::Host => cudaCpuDeviceId,
        }
    }
}

static ADVISE_13: Function<cudaMemAdvise_loc_fn> = Function::new(c"cudaMemAdvise");
static ADVISE_12: Function<cudaMemAdvise_int_fn> = Function::new(c"cudaMemAdvise");
static PREFETCH_13: Function<cudaMemPrefetchAsync_loc_fn> = Function::new(c"cudaMemPrefetchAsync");
static PREFETCH_12: Function<cudaMemPrefetchAsync_int_fn> = Function::new(c"cudaMemPrefetchAsync");

/// The runtime's version (13000 for 13.0), 0 until asked.
static RUNTIME_VERSION: AtomicI32 = AtomicI32::new(0);

/// The runtime's version as it answered (0 if never asked, or it could not
/// say), for the trace. Never asked here: at exit the runtime may already
/// be shutting down.
pub fn runtime_version() -> i32 {
    RUNTIME_VERSION.load(Ordering::Relaxed).max(0)
}

/// The runtime's major version; CUDA 13's forms if it cannot be asked.
pub fn runtime_major() -> i32 {
    let mut version = RUNTIME_VERSION.load(Ordering::Relaxed);
    if version == 0 {
        // SAFETY: writes the int we own.
        let rc = unsafe { real::cudaRuntimeGetVersion(&mut version) };
        if rc != cudaSuccess || version <= 0 {
            version = -1;
        }
        RUNTIME_VERSION.store(version, Ordering::Relaxed);
    }
    if version > 0 {
        version / 1000
    } else {
        13
    }
}

fn advise(ptr: *mut c_void, size: usize, advice: cudaMemoryAdvise, to: Location) -> cudaError_t {
    // SAFETY: the form of this runtime's version, with the caller's block.
    unsafe {
        if runtime_major() >= 13 {
            match ADVISE_13.get() {
                Some(f) => f(ptr, size, advice, to.as_mem_location()),
                None => missing("cudaMemAdvise"),
            }
        } else {
            match ADVISE_12.get() {
                Some(f) => f(ptr, size, advice, to.as_device_id()),
                None => missing("cudaMemAdvise"),
            }
        }
    }
}

fn prefetch(ptr: *mut c_void, size: usize, to: Location, stream: cudaStream_t) -> cudaError_t {
    // SAFETY: the form of this runtime's version, with the caller's block.
    unsafe {
        if runtime_major() >= 13 {
            match PREFETCH_13.get() {
                Some(f) => f(ptr, size, to.as_mem_location(), 0, stream),
                None => missing("cudaMemPrefetchAsync"),
            }
        } else {
            match PREFETCH_12.get() {
                Some(f) => f(ptr, size, to.as_device_id(), stream),
                None => missing("cudaMemPrefetchAsync"),
            }
        }
    }
}

/// Which API a block came through, and so which one moves it: a program
/// that only links the driver must not be sent through the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Runtime,
    Driver,
}

static DRIVER_ADVISE_V2: Function<cuMemAdvise_v2_fn> = Function::new(c"cuMemAdvise_v2");
static DRIVER_ADVISE: Function<cuMemAdvise_fn> = Function::new(c"cuMemAdvise");
static DRIVER_PREFETCH_V2: Function<cuMemPrefetchAsync_v2_fn> =
    Function::new(c"cuMemPrefetchAsync_v2");
static DRIVER_PREFETCH: Function<cuMemPrefetchAsync_fn> = Function::new(c"cuMemPrefetchAsync");

/// The shim's own non-blocking stream per device, made on first use, for
/// blocks of the runtime and of the driver.
static STREAMS: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
static DRIVER_STREAMS: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
/// A second driver stream per device: the spill tier's copies to the host
/// run on it while its copies to the device run on the first, so that the
/// link carries both directions at once.
static DRIVER_STREAMS_OUT: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
/// A third driver stream per device: the spill tier's copies onto the
/// device that wait for a freed block's memory, so that they hold up no
/// other copy.
static DRIVER_STREAMS_AFTER_FREE: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
/// A fourth driver stream per device: the copies onto the device of blocks
/// brought ahead of need into a freed block's memory, so that their waits
/// for frees the device reaches late hold up no copy of a block work names
/// now.
static DRIVER_STREAMS_AHEAD_AFTER_FREE: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];

/// In a forked child: the parent's streams are not the child's.
pub fn forget_streams() {
    for slot in STREAMS
        .iter()
        .chain(&DRIVER_STREAMS)
        .chain(&DRIVER_STREAMS_OUT)
        .chain(&DRIVER_STREAMS_AFTER_FREE)
        .chain(&DRIVER_STREAMS_AHEAD_AFTER_FREE)
    {
        slot.store(std::ptr::null_mut(), Ordering::Release);
    }
}

impl Backend {
    pub fn of(api: Api) -> Backend {
        if api.is_driver() {
            Backend::Driver
        } else {
            Backend::Runtime
        }
    }

    /// The API's name for the shim's own prefetches, in the trace.
    pub fn prefetch_api(self) -> Api {
        match self {
            Backend::Runtime => Api::cudaMemPrefetchAsync,
            Backend::Driver => Api::cuMemPrefetchAsync,
        }
    }

    /// The calling thread's current device (the runtime's, or the current
    /// context's).
    pub fn current_device(self) -> Result<Device, c_int> {
        let mut device: c_int = -1;
        // SAFETY: writes the int we own.
        let rc = unsafe {
            match self {
                Backend::Runtime => real::cudaGetDevice(&mut device),
                Backend::Driver => real::cuCtxGetDevice(&mut device),
            }
        };
        check(rc)?;
        u32::try_from(device)
            .ok()
            .and_then(Device::new)
            .ok_or(cudaErrorInvalidValue)
    }

    /// How many devices the process sees.
    pub fn device_count(self) -> Result<u32, c_int> {
        let mut count: c_int = 0;
        // SAFETY: writes an integer we own.
        let rc = unsafe {
            match self {
                Backend::Runtime => real::cudaGetDeviceCount(&mut count),
                Backend::Driver => real::cuDeviceGetCount(&mut count),
            }
        };
        check(rc).map(|()| count.max(0) as u32)
    }

    /// The PCI address (domain, bus, device) of the process's device
    /// `number`, as the driver says.
    pub fn pci_address(number: u32) -> Option<(u32, u32, u32)> {
        // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, _PCI_DEVICE_ID, _PCI_DOMAIN_ID.
        let ask = |attribute: c_int| {
            let mut value: c_int = 0;
            // SAFETY: writes an integer we own.
            let rc =
                unsafe { real::cuDeviceGetAttribute(&mut value, attribute, number as CUdevice) };
            (rc == CUDA_SUCCESS && value >= 0).then_some(value as u32)
        };
        Some((ask(50)?, ask(33)?, ask(34)?))
    }

    /// The real (free, total) of the current device.
    pub fn mem_get_info(self) -> Result<(usize, usize), c_int> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two integers we own.
        let rc = unsafe {
            match self {
                Backend::Runtime => real::cudaMemGetInfo(&mut free, &mut total),
                Backend::Driver => real::cuMemGetInfo_v2(&mut free, &mut total),
            }
        };
        check(rc).map(|()| (free, total))
    }

    /// Managed memory for the shim's own placements; a success without a
    /// pointer counts as out of memory.
    pub fn malloc_managed(self, size: usize, flags: c_uint) -> Result<*mut c_void, c_int> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes a pointer (a 64-bit device address) we own.
        let rc = unsafe {
            match self {
                Backend::Runtime => real::cudaMallocManaged(&mut ptr, size, flags),
                Backend::Driver => real::cuMemAllocManaged(
                    &mut ptr as *mut *mut c_void as *mut CUdeviceptr,
                    size,
                    flags,
                ),
            }
        };
        check(rc)?;
        if ptr.is_null() {
            return Err(cudaErrorMemoryAllocation);
        }
        Ok(ptr)
    }

    /// Frees managed memory (which the stream-ordered frees refuse).
    pub fn free_managed(self, ptr: *mut c_void) -> c_int {
        // SAFETY: a pointer this backend's managed allocation returned.
        unsafe {
            match self {
                Backend::Runtime => real::cudaFree(ptr),
                Backend::Driver => real::cuMemFree_v2(ptr as CUdeviceptr),
            }
        }
    }

    fn advise(self, ptr: *mut c_void, size: usize, advice: c_int, to: Location) -> c_int {
        match self {
            Backend::Runtime => advise(ptr, size, advice, to),
            // SAFETY: each form is called as its name says, with the
            // caller's block.
            Backend::Driver => unsafe {
                if let Some(f) = DRIVER_ADVISE_V2.get() {
                    f(ptr as CUdeviceptr, size, advice, to.as_mem_location())
                } else if let Some(f) = DRIVER_ADVISE.get() {
                    f(ptr as CUdeviceptr, size, advice, to.as_device_id())
                } else {
                    missing("cuMemAdvise")
                }
            },
        }
    }

    /// Prefetches to `to` on the shim's stream of `device` (the block's).
    fn prefetch(self, ptr: *mut c_void, size: usize, to: Location, device: Device) -> c_int {
        let stream = self.stream(device);
        match self {
            Backend::Runtime => prefetch(ptr, size, to, stream),
            // SAFETY: each form is called as its name says, with the
            // caller's block.
            Backend::Driver => unsafe {
                if let Some(f) = DRIVER_PREFETCH_V2.get() {
                    f(ptr as CUdeviceptr, size, to.as_mem_location(), 0, stream)
                } else if let Some(f) = DRIVER_PREFETCH.get() {
                    f(ptr as CUdeviceptr, size, to.as_device_id(), stream)
                } else {
                    missing("cuMemPrefetchAsync")
                }
            },
        }
    }

    /// A spilled block: its pages past `device_part` live on the host, and
    /// the device reads them over the link through its mappings instead of
    /// faulting them across; its first `device_part` bytes (0 for none)
    /// prefer the device, where the GPU's first touch places them.
    pub fn place_split(
        self,
        ptr: *mut c_void,
        size: usize,
        device_part: usize,
        device: Device,
    ) -> c_int {
        let mut rc = cudaSuccess;
        if device_part > 0 {
            rc = self.advise(
                ptr,
                device_part,
                cudaMemAdviseSetPreferredLocation,
                Location::Device(device),
            );
        }
        let tail = (ptr as *mut u8).wrapping_add(device_part) as *mut c_void;
        let rc2 = self.advise(
            tail,
            size - device_part,
            cudaMemAdviseSetPreferredLocation,
            Location::Host,
        );
        let rc3 = self.advise(
            tail,
            size - device_part,
            cudaMemAdviseSetAccessedBy,
            Location::Device(device),
        );
        first_error(first_error(rc, rc2), rc3)
    }

    /// A promoted block: it prefers its device, and its pages are moved
    /// there asynchronously on the shim's own stream. Nothing waits for the
    /// move: managed memory is coherent wherever it sits.
    pub fn move_to_device(self, ptr: *mut c_void, size: usize, device: Device) -> c_int {
        let rc = self.advise(
            ptr,
            size,
            cudaMemAdviseSetPreferredLocation,
            Location::Device(device),
        );
        let rc2 = self.prefetch(ptr, size, Location::Device(device), device);
        first_error(rc, rc2)
    }

    /// A demoted block: it prefers the host, stays mapped for the device,
    /// and its pages are moved to the host on the shim's own stream.
    pub fn move_to_host(self, ptr: *mut c_void, size: usize, device: Device) -> c_int {
        let rc = self.place_split(ptr, size, 0, device);
        let rc2 = self.prefetch(ptr, size, Location::Host, device);
        first_error(rc, rc2)
    }

    /// The shim's non-blocking stream for `device`, made once. Null (the
    /// default stream) if it cannot be made. The driver's is made in the
    /// calling thread's current context, which is the block's when its own
    /// free triggers the promotion.
    pub fn stream(self, device: Device) -> *mut c_void {
        match self {
            Backend::Runtime => made_once(&STREAMS[device.index()], || runtime_stream(device)),
            Backend::Driver => made_once(&DRIVER_STREAMS[device.index()], driver_stream),
        }
    }

    /// The driver's second stream for `device` (see [`DRIVER_STREAMS_OUT`]).
    pub fn second_stream(device: Device) -> *mut c_void {
        made_once(&DRIVER_STREAMS_OUT[device.index()], driver_stream)
    }

    /// The driver's third stream for `device` (see
    /// [`DRIVER_STREAMS_AFTER_FREE`]).
    pub fn third_stream(device: Device) -> *mut c_void {
        made_once(&DRIVER_STREAMS_AFTER_FREE[device.index()], driver_stream)
    }

    /// The driver's fourth stream for `device` (see
    /// [`DRIVER_STREAMS_AHEAD_AFTER_FREE`]).
    pub fn fourth_stream(device: Device) -> *mut c_void {
        made_once(
            &DRIVER_STREAMS_AHEAD_AFTER_FREE[device.index()],
            driver_stream,
        )
    }
}

/// The stream in `slot`, made by `make` the first time (null if it cannot
/// be made).
fn made_once(slot: &AtomicPtr<c_void>, make: impl FnOnce() -> *mut c_void) -> *mut c_void {
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let stream = make();
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

/// A non-blocking driver stream in the calling thread's current context.
fn driver_stream() -> *mut c_void {
    let mut stream: CUstream = std::ptr::null_mut();
    // SAFETY: writes a handle we own.
    let rc = unsafe { real::cuStreamCreate(&mut stream, CU_STREAM_NON_BLOCKING) };
    if rc == CUDA_SUCCESS {
        stream
    } else {
        std::ptr::null_mut()
    }
}

fn first_error(a: c_int, b: c_int) -> c_int {
    if a != cudaSuccess {
        a
    } else {
        b
    }
}

/// A non-blocking runtime stream on `device`; the caller's current device
/// is put back afterwards.
fn runtime_stream(device: Device) -> cudaStream_t {
    let previous = Backend::Runtime.current_device().ok();
    let mut stream: cudaStream_t = std::ptr::null_mut();
    // SAFETY: plain runtime calls with values we own.
    unsafe {
        if previous != Some(device) {
            real::cudaSetDevice(device.number() as c_int);
        }
        if real::cudaStreamCreateWithFlags(&mut stream, cudaStreamNonBlocking) != cudaSuccess {
            stream = std::ptr::null_mut();
        }
        if let Some(previous) = previous.filter(|p| *p != device) {
            real::cudaSetDevice(previous.number() as c_int);
        }
    }
    stream
}
