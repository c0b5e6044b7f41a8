//! The pieces of the CUDA runtime API that vramshare's hooks need, and a way to
//! find the real runtime's functions inside the process.
//!
//! Names follow NVIDIA's headers (`driver_types.h`, `cuda_runtime_api.h`) so
//! that `tests/layout.rs` can check every value against them. C enums are
//! `int`-sized on every platform CUDA supports, so they are `c_int` here.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::os::raw::{c_int, c_uint, c_void};

mod loader;
pub use loader::{
    driver_library, in_other_runtimes, library_of, loaded_object_named, lookup, runtime_library,
    Function, Symbol,
};

pub type cudaError_t = c_int;
pub const cudaSuccess: cudaError_t = 0;
pub const cudaErrorInvalidValue: cudaError_t = 1;
pub const cudaErrorInvalidDeviceFunction: cudaError_t = 98;
pub const cudaErrorMemoryAllocation: cudaError_t = 2;
pub const cudaErrorInitializationError: cudaError_t = 3;
pub const cudaErrorInsufficientDriver: cudaError_t = 35;
pub const cudaErrorNoDevice: cudaError_t = 100;
pub const cudaErrorNotSupported: cudaError_t = 801;

/// A CUDA status (runtime or driver: success is 0 in both) as a `Result`,
/// in one place: `Err` carries the error code.
pub fn check(rc: cudaError_t) -> Result<(), cudaError_t> {
    if rc == cudaSuccess {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Opaque handles.
pub type cudaStream_t = *mut c_void;
pub type cudaMemPool_t = *mut c_void;
/// A kernel as CUDA 13's host stubs name it (`__cudaLaunchKernel`'s first argument).
pub type cudaKernel_t = *mut c_void;
pub type cudaGraphExec_t = *mut c_void;
pub type cudaGraph_t = *mut c_void;

/// `dim3`, passed by value to the launch calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

/// `enum cudaMemoryAdvise`.
pub type cudaMemoryAdvise = c_int;
pub const cudaMemAdviseSetPreferredLocation: cudaMemoryAdvise = 3;
pub const cudaMemAdviseSetAccessedBy: cudaMemoryAdvise = 5;

/// `enum cudaMemLocationType`.
pub type cudaMemLocationType = c_int;
pub const cudaMemLocationTypeDevice: cudaMemLocationType = 1;
pub const cudaMemLocationTypeHost: cudaMemLocationType = 2;
pub const cudaMemLocationTypeHostNuma: cudaMemLocationType = 3;

/// `struct cudaMemLocation`, passed by value to the CUDA 13 forms of
/// `cudaMemAdvise` and `cudaMemPrefetchAsync` (and the CUDA 12 `_v2` forms).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct cudaMemLocation {
    pub type_: cudaMemLocationType,
    pub id: c_int,
}

impl cudaMemLocation {
    pub const fn device(ordinal: c_int) -> Self {
        Self {
            type_: cudaMemLocationTypeDevice,
            id: ordinal,
        }
    }
    pub const fn host() -> Self {
        Self {
            type_: cudaMemLocationTypeHost,
            id: 0,
        }
    }
}

/// The device id that names the host in the CUDA 12 `int device` forms.
pub const cudaCpuDeviceId: c_int = -1;

/// `cudaMallocManaged` flags.
pub const cudaMemAttachGlobal: c_uint = 0x01;
pub const cudaMemAttachHost: c_uint = 0x02;

/// `cudaStreamCreateWithFlags` flag: no implicit synchronisation with stream 0.
pub const cudaStreamNonBlocking: c_uint = 0x01;

/// `struct cudaExtent`: width in bytes, height and depth in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct cudaExtent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// `struct cudaPitchedPtr`, filled in by `cudaMalloc3D`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cudaPitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// CUDA 13 (and CUDA 12 `_v2`): `cudaMemAdvise(ptr, count, advice, struct cudaMemLocation)`.
pub type cudaMemAdvise_loc_fn =
    unsafe extern "C" fn(*const c_void, usize, cudaMemoryAdvise, cudaMemLocation) -> cudaError_t;
/// CUDA 12: `cudaMemAdvise(ptr, count, advice, int device)`, host = `cudaCpuDeviceId`.
pub type cudaMemAdvise_int_fn =
    unsafe extern "C" fn(*const c_void, usize, cudaMemoryAdvise, c_int) -> cudaError_t;
/// CUDA 13 (and CUDA 12 `_v2`):
/// `cudaMemPrefetchAsync(ptr, count, struct cudaMemLocation, unsigned flags, stream)`.
pub type cudaMemPrefetchAsync_loc_fn = unsafe extern "C" fn(
    *const c_void,
    usize,
    cudaMemLocation,
    c_uint,
    cudaStream_t,
) -> cudaError_t;
/// CUDA 12: `cudaMemPrefetchAsync(ptr, count, int dstDevice, stream)`.
pub type cudaMemPrefetchAsync_int_fn =
    unsafe extern "C" fn(*const c_void, usize, c_int, cudaStream_t) -> cudaError_t;

// ---- The driver API (`cuda.h`), for programs that allocate through it ----

pub type CUresult = c_int;
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// A device address (`unsigned long long`).
pub type CUdeviceptr = u64;
pub type CUdevice = c_int;
pub type CUstream = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUkernel = *mut c_void;
/// An opaque handle of cuBLAS, cuBLASLt or cuDNN (a handle, a descriptor,
/// a layout): passed through, never looked into.
pub type LibraryHandle = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUmemoryPool = *mut c_void;

/// `CUmem_advise`.
pub type CUmem_advise = c_int;
pub const CU_MEM_ADVISE_SET_PREFERRED_LOCATION: CUmem_advise = 3;
pub const CU_MEM_ADVISE_SET_ACCESSED_BY: CUmem_advise = 5;

/// `CUmemLocationType`.
pub type CUmemLocationType = c_int;
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 1;
pub const CU_MEM_LOCATION_TYPE_HOST: CUmemLocationType = 2;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: CUmemLocationType = 3;
/// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID`: the host NUMA node nearest the device (-1: none).
pub const CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: c_int = 134;

/// `CUmemLocation`: the same layout as `cudaMemLocation`.
pub type CUmemLocation = cudaMemLocation;

/// The device id that names the host in the older `CUdevice` forms.
pub const CU_DEVICE_CPU: CUdevice = -1;
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 0x1;
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;

/// `cuMemAdvise_v2(ptr, count, advice, CUmemLocation)` (CUDA 12.2 and later).
pub type cuMemAdvise_v2_fn =
    unsafe extern "C" fn(CUdeviceptr, usize, CUmem_advise, CUmemLocation) -> CUresult;
/// `cuMemAdvise(ptr, count, advice, CUdevice)`, host = `CU_DEVICE_CPU`.
pub type cuMemAdvise_fn =
    unsafe extern "C" fn(CUdeviceptr, usize, CUmem_advise, CUdevice) -> CUresult;
/// `cuMemPrefetchAsync_v2(ptr, count, CUmemLocation, flags, stream)`.
pub type cuMemPrefetchAsync_v2_fn =
    unsafe extern "C" fn(CUdeviceptr, usize, CUmemLocation, c_uint, CUstream) -> CUresult;
/// `cuMemPrefetchAsync(ptr, count, CUdevice, stream)`.
pub type cuMemPrefetchAsync_fn =
    unsafe extern "C" fn(CUdeviceptr, usize, CUdevice, CUstream) -> CUresult;

/// `CUmemGenericAllocationHandle`: physical memory of the virtual memory API.
pub type CUmemGenericAllocationHandle = u64;

/// `CUmemAccessDesc`: who may read and write a mapped range.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_int,
}
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;

/// `CUmemAllocationProp` (what `cuMemCreate` is asked for); vramshare reads
/// only `location`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    pub type_: c_int,
    pub requestedHandleTypes: c_int,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: [u8; 8],
}
