//! The virtual memory calls behind the tier's blocks: a reserved range per
//! block (the block, then its staging half), physical memory on the device
//! or the host, mappings with the device's access, the copy engine's
//! copies on the tier's own stream, and the wait for the device.
//! Every call is the driver's real one; a failure is returned as CUDA's
//! code, and the caller leaves the block as it was.

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::config::Device;
use crate::cuda::backend::Backend;
use crate::cuda::real;

/// The granularity of the tier's blocks: the GPU's large page, which is
/// also what the driver asks of device and host physical memory.
pub const PAGE: u64 = 2 << 20;

pub type Result<T> = std::result::Result<T, CUresult>;

fn check(rc: CUresult) -> Result<()> {
    if rc == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Makes the device's context current on this thread for the driver's
/// calls: a runtime program's first allocation may come before it is.
pub fn ready(api: Api) -> Result<()> {
    if Backend::of(api) == Backend::Runtime {
        // SAFETY: cudaFree(NULL) frees nothing; it makes the context.
        check(unsafe { real::cudaFree(std::ptr::null_mut()) })?;
    }
    Ok(())
}

/// The calling thread's current context, if it has one: where a thread of
/// the shim's is handed work, the context to make it in.
pub fn current_context() -> Option<usize> {
    let mut context = std::ptr::null_mut();
    // SAFETY: writes the pointer we own.
    let rc = unsafe { real::cuCtxGetCurrent(&mut context) };
    (rc == CUDA_SUCCESS && !context.is_null()).then_some(context as usize)
}

/// On a thread of the shim's, makes `context` current unless it is
/// already (`current`: the one the thread made current last, updated).
pub fn make_current(context: usize, current: &mut usize) -> Result<()> {
    if *current != context {
        // SAFETY: a context a job's thread had current as it handed the
        // work over; the job's own.
        let rc = unsafe { real::cuCtxSetCurrent(context as *mut std::ffi::c_void) };
        if rc != CUDA_SUCCESS {
            return Err(rc);
        }
        *current = context;
    }
    Ok(())
}

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: i32 = 2;

/// On a thread of the shim's: its calls never end a graph capture another
/// thread is making.
pub fn relax_capture_mode() {
    let mut mode = CAPTURE_MODE_RELAXED;
    // SAFETY: writes the mode we own. Refused only by a driver without
    // graphs, where no capture can be under way either.
    let _ = unsafe { real::cuThreadExchangeStreamCaptureMode(&mut mode) };
}

/// Reserves the range of a block of `size` bytes and its staging half.
pub fn reserve(size: u64) -> Result<CUdeviceptr> {
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: writes the address we own.
    check(unsafe { real::cuMemAddressReserve(&mut ptr, 2 * size as usize, PAGE as usize, 0, 0) })?;
    Ok(ptr)
}

/// Gives the block's range (both halves) back.
pub fn unreserve(ptr: CUdeviceptr, size: u64) {
    // SAFETY: a range `reserve` made, with nothing mapped in it.
    let rc = unsafe { real::cuMemAddressFree(ptr, 2 * size as usize) };
    if rc != CUDA_SUCCESS {
        debug!("freeing the tier's range at {ptr:#x}: CUDA error {rc}");
    }
}

/// Physical memory of `size` bytes for `device`: on it, or in host memory
/// (the NUMA node nearest it, else anywhere on the host).
pub fn create(size: u64, device: Device, on_device: bool) -> Result<u64> {
    let prop = |type_, id| CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: 0,
        location: CUmemLocation { type_, id },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: [0; 8],
    };
    let number = device.number() as i32;
    let forms = if on_device {
        vec![prop(CU_MEM_LOCATION_TYPE_DEVICE, number)]
    } else {
        vec![
            prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, host_numa_node(device)),
            prop(CU_MEM_LOCATION_TYPE_HOST, 0),
        ]
    };
    let mut first = CUDA_SUCCESS;
    for prop in forms {
        let mut handle = 0;
        // SAFETY: the properties and the handle are ours.
        let rc = unsafe { real::cuMemCreate(&mut handle, size as usize, &prop, 0) };
        if rc == CUDA_SUCCESS {
            return Ok(handle);
        }
        if first == CUDA_SUCCESS {
            first = rc;
        }
    }
    Err(first)
}

fn host_numa_node(device: Device) -> i32 {
    let mut numa = -1;
    // SAFETY: writes the int we own.
    let rc = unsafe {
        real::cuDeviceGetAttribute(
            &mut numa,
            CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
            device.number() as CUdevice,
        )
    };
    if rc == CUDA_SUCCESS && numa >= 0 {
        numa
    } else {
        0
    }
}

pub fn release(handle: u64) {
    // SAFETY: a handle `create` made, released once.
    let rc = unsafe { real::cuMemRelease(handle) };
    if rc != CUDA_SUCCESS {
        debug!("releasing the tier's memory {handle}: CUDA error {rc}");
    }
}

/// Maps `handle` (`size` bytes) at `ptr` and lets `device` read and write it.
pub fn map(ptr: CUdeviceptr, size: u64, handle: u64, device: Device) -> Result<()> {
    // SAFETY: a reserved range with nothing mapped there, and a live handle.
    check(unsafe { real::cuMemMap(ptr, size as usize, 0, handle, 0) })?;
    let access = CUmemAccessDesc {
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: device.number() as i32,
        },
        flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the range just mapped, and one access descriptor of ours.
    let rc = unsafe { real::cuMemSetAccess(ptr, size as usize, &access, 1) };
    if rc != CUDA_SUCCESS {
        unmap(ptr, size);
        return Err(rc);
    }
    Ok(())
}

pub fn unmap(ptr: CUdeviceptr, size: u64) {
    // SAFETY: a range of the tier's, mapped by `map`.
    let rc = unsafe { real::cuMemUnmap(ptr, size as usize) };
    if rc != CUDA_SUCCESS {
        debug!("unmapping the tier's range at {ptr:#x}: CUDA error {rc}");
    }
}

/// Unmaps a block of `size` bytes at `ptr` if memory is mapped there
/// (`mapped`), and its staging half if host memory is mapped there
/// (`staged`), and gives the range back.
pub fn unmap_block(ptr: CUdeviceptr, size: u64, mapped: bool, staged: bool) {
    if mapped {
        unmap(ptr, size);
    }
    if staged {
        unmap(ptr + size, size);
    }
    unreserve(ptr, size);
}

/// Which way a move goes: each way has a stream of its own, so that the
/// link carries both at once; and moves onto the device into memory a
/// freed block lends, whose copies wait for its free, one more, so that
/// those waits hold up no other copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    ToDevice,
    ToHost,
    AfterFree,
    /// As `AfterFree`, for blocks brought ahead of need.
    AheadAfterFree,
}

impl Direction {
    /// Every stream of the tier's copies onto the device.
    pub const IN: [Direction; 3] = [
        Direction::ToDevice,
        Direction::AfterFree,
        Direction::AheadAfterFree,
    ];

    /// Whether copies this way go into memory a freed block lends.
    pub fn after_free(self) -> bool {
        matches!(self, Direction::AfterFree | Direction::AheadAfterFree)
    }
}

/// The shim's own non-blocking stream for copies `direction` on `device`.
/// Those of `ToDevice` and `ToHost` wait for no job's stream: the drain
/// before a move has waited for all of them, or, where moves overlap the
/// job's kernels, each block's own last use has ([`super::uses`]). Those of
/// `AfterFree` and `AheadAfterFree` wait for the frees of the blocks lending
/// their memory: a stream each, so that copies of blocks brought ahead of
/// need, whose lenders' frees the device may reach late, never hold up a
/// block work names now.
pub fn stream(device: Device, direction: Direction) -> Result<CUstream> {
    let stream = match direction {
        Direction::ToDevice => Backend::Driver.stream(device),
        Direction::ToHost => Backend::second_stream(device),
        Direction::AfterFree => Backend::third_stream(device),
        Direction::AheadAfterFree => Backend::fourth_stream(device),
    };
    if stream.is_null() {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    } else {
        Ok(stream)
    }
}

/// Queues a copy of `size` bytes from `src` to `dst` on the stream of
/// `direction`.
pub fn copy(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    size: u64,
    device: Device,
    direction: Direction,
) -> Result<()> {
    let stream = stream(device, direction)?;
    // SAFETY: both ranges are mapped for the device, `size` bytes each.
    check(unsafe { real::cuMemcpyAsync(dst, src, size as usize, stream) })
}

/// Records `event` on the stream of `direction` on `device`, after the
/// copies queued there so far.
pub fn mark(event: usize, device: Device, direction: Direction) -> Result<()> {
    let stream = stream(device, direction)?;
    // SAFETY: an event the tier made, and the shim's own stream.
    check(unsafe { real::cuEventRecord(event as *mut std::ffi::c_void, stream) })
}

/// Waits for the copies before `event`'s record.
pub fn wait_event(event: usize) -> Result<()> {
    // SAFETY: an event the tier made and recorded.
    check(unsafe { real::cuEventSynchronize(event as *mut std::ffi::c_void) })
}

/// A driver event without timing, for a move's copy.
pub fn make_event() -> Result<usize> {
    let mut event = std::ptr::null_mut();
    // SAFETY: writes the event we own. 2: CU_EVENT_DISABLE_TIMING.
    check(unsafe { real::cuEventCreate(&mut event, 2) })?;
    Ok(event as usize)
}

pub fn destroy_event(event: usize) {
    // SAFETY: an event `make_event` made, destroyed once.
    unsafe { real::cuEventDestroy_v2(event as *mut std::ffi::c_void) };
}

/// Waits for the copies queued `direction` on `device`.
pub fn wait(device: Device, direction: Direction) -> Result<()> {
    let stream = stream(device, direction)?;
    // SAFETY: the shim's own stream.
    check(unsafe { real::cuStreamSynchronize(stream) })
}

/// Waits until the device has finished all the work it was given.
pub fn drain(api: Api) -> Result<()> {
    match Backend::of(api) {
        // SAFETY: no arguments.
        Backend::Runtime => check(unsafe { real::cudaDeviceSynchronize() }),
        // SAFETY: no arguments.
        Backend::Driver => check(unsafe { real::cuCtxSynchronize() }),
    }
}
