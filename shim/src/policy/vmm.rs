//! The virtual memory API's physical memory (`cuMemCreate` and the calls
//! that end it): counted from creation until it is both released and
//! unmapped, and made on the host over the quota.

use std::sync::atomic::Ordering;

use cudart_sys::*;
use vramshare_common::event::{Api, Op, Placement};

use crate::config::{human_bytes, Device, Spill};
use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::ledger::{Block, Released};
use crate::state::{config, state, State};

use super::allocate::record_rejection;
use super::moves::promote;
use super::quota::device_quota;

/// `cuMemCreate`: physical memory made on a device counts against its quota
/// until `cuMemRelease`. Over the quota (spill `host`), the memory is made on
/// the host instead, in the device's nearest NUMA node, where the driver
/// allows it; the caller maps it and grants the device access as it would
/// have, and the GPU reaches it over the link. Where the driver refuses host
/// memory, the answer is `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// # Safety
/// The pointers are the caller's, as the driver would receive them.
pub unsafe fn mem_create(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    real_create: impl Fn(*const CUmemAllocationProp) -> CUresult,
) -> CUresult {
    let asked = if handle.is_null() || prop.is_null() {
        None
    } else {
        // SAFETY: `prop` is the caller's, not null.
        Some(unsafe { *prop })
    };
    let on_device = asked
        .filter(|p| p.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE)
        .and_then(|p| Some((p, Device::new(u32::try_from(p.location.id).ok()?)?)));
    let Some((asked, device)) = on_device else {
        return real_create(prop);
    };
    let state = state();
    let api = Api::cuMemCreate;
    let size = size as u64;
    let quota = device_quota(state, device, Backend::Driver);
    let limit = quota.unwrap_or(u64::MAX);
    // The spill tier's kept blocks give their room back first.
    let fits = state.ledger.try_reserve(device, size, limit)
        || super::tier::kept::room_for(state, device, size, limit, true);
    let refuse = |why: &str| {
        info!(
            "cuMemCreate of {} refused: over device {device}'s quota{why}",
            human_bytes(size)
        );
        record_rejection(
            state,
            api,
            device,
            size,
            Placement::Device,
            CUDA_ERROR_OUT_OF_MEMORY,
        )
    };
    let (rc, placement) = if fits {
        let rc = real_create(prop);
        if rc != CUDA_SUCCESS {
            state.ledger.unreserve(device, size);
            return record_rejection(state, api, device, size, Placement::Device, rc);
        }
        (rc, Placement::Device)
    } else if config().spill == Spill::Off {
        return refuse(" (VRAMSHARE_SPILL=off)");
    } else {
        match create_on_host(device, &asked, &real_create) {
            Ok(rc) => (rc, Placement::Host),
            Err(rc) => {
                info!("cuMemCreate of {} over device {device}'s quota: the driver refused host memory (CUDA error {rc})", human_bytes(size));
                return record_rejection(
                    state,
                    api,
                    device,
                    size,
                    Placement::Host,
                    CUDA_ERROR_OUT_OF_MEMORY,
                );
            }
        }
    };
    // SAFETY: the driver has written the caller's `handle`, not null.
    let made = unsafe { *handle };
    state.ledger.insert_handle(
        made,
        Block {
            size,
            device,
            pool: 0,
            placement,
            // Physical memory is made whole, on the device or on the host.
            device_part: if placement == Placement::Device {
                size
            } else {
                0
            },
            api,
            managed: false,
            moving: false,
            tiered: false,
        },
    );
    let usage = state.ledger.device(device);
    usage.allocations.fetch_add(1, Ordering::Relaxed);
    if placement == Placement::Host && usage.spills.fetch_add(1, Ordering::Relaxed) == 0 {
        warn!("device {device} is at its quota: physical memory (cuMemCreate) is now made on the host (the job slows down instead of failing)");
    }
    state.record(
        Op::Alloc,
        api,
        device.number() as i32,
        made as usize,
        size,
        placement,
        rc,
    );
    rc
}

/// Makes the physical memory asked for `device` on the host, trying in turn:
/// the NUMA node nearest the device with the caller's properties; the same
/// without the allocation flags (PyTorch and XLA ask for GPUDirect RDMA,
/// which host memory may not offer); anywhere on the host, not shareable
/// with other processes (the driver allows no handle type there).
fn create_on_host(
    device: Device,
    asked: &CUmemAllocationProp,
    real_create: &impl Fn(*const CUmemAllocationProp) -> CUresult,
) -> Result<CUresult, CUresult> {
    let mut numa: std::ffi::c_int = -1;
    // SAFETY: writes the int we own.
    let rc = unsafe {
        real::cuDeviceGetAttribute(
            &mut numa,
            CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
            device.number() as CUdevice,
        )
    };
    let numa = if rc == CUDA_SUCCESS && numa >= 0 {
        numa
    } else {
        0
    };
    let on_numa = CUmemAllocationProp {
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_HOST_NUMA,
            id: numa,
        },
        ..*asked
    };
    let plain_numa = CUmemAllocationProp {
        allocFlags: [0; 8],
        ..on_numa
    };
    let anywhere = CUmemAllocationProp {
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
        requestedHandleTypes: 0,
        ..plain_numa
    };
    let mut first = CUDA_SUCCESS;
    for (form, prop) in [
        ("host NUMA node", on_numa),
        ("host NUMA node, no allocation flags", plain_numa),
        ("host, no handle type or allocation flags", anywhere),
    ] {
        let rc = real_create(&prop);
        if rc == CUDA_SUCCESS {
            debug!("cuMemCreate for device {device} made on the {form}");
            return Ok(rc);
        }
        debug!("cuMemCreate on the {form}: CUDA error {rc}");
        if first == CUDA_SUCCESS {
            first = rc;
        }
    }
    Err(first)
}

/// `cuMemRelease`: the handle's bytes stop counting (and spilled blocks may
/// come back into the room), unless the memory is still mapped: the driver
/// frees it at the last `cuMemUnmap`, and so does the count.
pub fn mem_release(
    handle: CUmemGenericAllocationHandle,
    real_release: impl FnOnce() -> CUresult,
) -> CUresult {
    let state = state();
    // Taken out of the ledger first: once released, the driver may hand
    // the same handle value to another thread's cuMemCreate.
    let released = state.ledger.release_physical(handle);
    let rc = real_release();
    match released {
        Released::Freed(block) => physical_freed(state, Api::cuMemRelease, handle, block, rc),
        Released::StillMapped => {
            debug!("cuMemRelease of handle {handle}: still mapped, counted until unmapped")
        }
        Released::Unknown => state.record(
            Op::Free,
            Api::cuMemRelease,
            -1,
            handle as usize,
            0,
            Placement::Unknown,
            rc,
        ),
    }
    rc
}

/// `cuMemMap`: a mapping keeps the handle's memory alive past its release.
pub fn mem_map(
    ptr: CUdeviceptr,
    size: usize,
    handle: CUmemGenericAllocationHandle,
    real_map: impl FnOnce() -> CUresult,
) -> CUresult {
    let rc = real_map();
    if rc == CUDA_SUCCESS {
        state().ledger.map_physical(ptr as usize, size, handle);
    }
    rc
}

/// `cuMemUnmap`: released memory whose last mapping this was is freed.
pub fn mem_unmap(ptr: CUdeviceptr, size: usize, real_unmap: impl FnOnce() -> CUresult) -> CUresult {
    let rc = real_unmap();
    if rc == CUDA_SUCCESS {
        let state = state();
        for (handle, block) in state.ledger.unmap_physical(ptr as usize, size) {
            physical_freed(state, Api::cuMemUnmap, handle, block, rc);
        }
    }
    rc
}

/// Physical memory the driver has freed: recorded (the event's `ptr` is the
/// handle), and its room goes to spilled blocks.
fn physical_freed(
    state: &State,
    api: Api,
    handle: CUmemGenericAllocationHandle,
    block: Block,
    rc: CUresult,
) {
    state.record(
        Op::Free,
        api,
        block.device.number() as i32,
        handle as usize,
        block.size,
        block.placement,
        rc,
    );
    promote(state, block.device, Backend::Driver);
}
