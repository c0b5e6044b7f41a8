//! The handler of each hooked function, by its name: what the exported hook
//! runs inside the guard (see [`crate::cuda::functions`]). Each one hands
//! the call to the policy with the real function to make it.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::backend::Backend;
use crate::cuda::real;

mod copies;
mod described_copies;
mod graphs;
mod launches;
mod libraries;
mod pools;
pub use copies::*;
pub use described_copies::*;
pub use graphs::*;
pub use launches::*;
pub use libraries::*;
pub use pools::*;

pub unsafe fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc(Api::cudaMalloc, ptr, size, |out| {
            real::cudaMalloc(out, size)
        })
    }
}

pub unsafe fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_managed(Api::cudaMallocManaged, ptr, size, flags, |out| {
            real::cudaMallocManaged(out, size, flags)
        })
    }
}

pub unsafe fn cudaMallocPitch(
    ptr: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pitch(Api::cudaMallocPitch, ptr, pitch, width, height, || {
            real::cudaMallocPitch(ptr, pitch, width, height)
        })
    }
}

pub unsafe fn cudaMalloc3D(pitched: *mut cudaPitchedPtr, extent: cudaExtent) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe { super::malloc_3d(pitched, extent) }
}

pub unsafe fn cudaMallocAsync(
    ptr: *mut *mut c_void,
    size: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cudaMallocAsync,
            ptr,
            size,
            std::ptr::null_mut(),
            stream,
            |out| real::cudaMallocAsync(out, size, stream),
        )
    }
}

pub unsafe fn cudaMallocAsync_ptsz(
    ptr: *mut *mut c_void,
    size: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cudaMallocAsync_ptsz,
            ptr,
            size,
            std::ptr::null_mut(),
            stream,
            |out| real::cudaMallocAsync_ptsz(out, size, stream),
        )
    }
}

pub unsafe fn cudaMallocFromPoolAsync(
    ptr: *mut *mut c_void,
    size: usize,
    pool: cudaMemPool_t,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cudaMallocFromPoolAsync,
            ptr,
            size,
            pool,
            stream,
            |out| real::cudaMallocFromPoolAsync(out, size, pool, stream),
        )
    }
}

pub unsafe fn cudaMallocFromPoolAsync_ptsz(
    ptr: *mut *mut c_void,
    size: usize,
    pool: cudaMemPool_t,
    stream: cudaStream_t,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cudaMallocFromPoolAsync_ptsz,
            ptr,
            size,
            pool,
            stream,
            |out| real::cudaMallocFromPoolAsync_ptsz(out, size, pool, stream),
        )
    }
}

pub unsafe fn cudaFree(ptr: *mut c_void) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe { super::free(Api::cudaFree, ptr, None, |p| real::cudaFree(p)) }
}

pub unsafe fn cudaFreeAsync(ptr: *mut c_void, stream: cudaStream_t) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::free(Api::cudaFreeAsync, ptr, Some(stream), |p| {
            real::cudaFreeAsync(p, stream)
        })
    }
}

pub unsafe fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: cudaStream_t) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::free(Api::cudaFreeAsync_ptsz, ptr, Some(stream), |p| {
            real::cudaFreeAsync_ptsz(p, stream)
        })
    }
}

pub unsafe fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::mem_get_info(Backend::Runtime, free, total, |f, t| {
            real::cudaMemGetInfo(f, t)
        })
    }
}

// The driver API, for programs that allocate through libcuda.so.1
// directly. A device address (CUdeviceptr) is a 64-bit integer,
// the size of a pointer, so it goes through the same policy.
pub unsafe fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, size: usize) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc(Api::cuMemAlloc_v2, ptr.cast(), size, |out| {
            real::cuMemAlloc_v2(out.cast(), size)
        })
    }
}

pub unsafe fn cuMemAllocManaged(ptr: *mut CUdeviceptr, size: usize, flags: c_uint) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_managed(Api::cuMemAllocManaged, ptr.cast(), size, flags, |out| {
            real::cuMemAllocManaged(out.cast(), size, flags)
        })
    }
}

pub unsafe fn cuMemAllocPitch_v2(
    ptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pitch(
            Api::cuMemAllocPitch_v2,
            ptr.cast(),
            pitch,
            width,
            height,
            || real::cuMemAllocPitch_v2(ptr, pitch, width, height, element),
        )
    }
}

pub unsafe fn cuMemAllocAsync(ptr: *mut CUdeviceptr, size: usize, stream: CUstream) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cuMemAllocAsync,
            ptr.cast(),
            size,
            std::ptr::null_mut(),
            stream.cast(),
            |out| real::cuMemAllocAsync(out.cast(), size, stream),
        )
    }
}

pub unsafe fn cuMemAllocAsync_ptsz(
    ptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cuMemAllocAsync_ptsz,
            ptr.cast(),
            size,
            std::ptr::null_mut(),
            stream.cast(),
            |out| real::cuMemAllocAsync_ptsz(out.cast(), size, stream),
        )
    }
}

pub unsafe fn cuMemAllocFromPoolAsync(
    ptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cuMemAllocFromPoolAsync,
            ptr.cast(),
            size,
            pool,
            stream.cast(),
            |out| real::cuMemAllocFromPoolAsync(out.cast(), size, pool, stream),
        )
    }
}

pub unsafe fn cuMemAllocFromPoolAsync_ptsz(
    ptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::malloc_pooled(
            Api::cuMemAllocFromPoolAsync_ptsz,
            ptr.cast(),
            size,
            pool,
            stream.cast(),
            |out| real::cuMemAllocFromPoolAsync_ptsz(out.cast(), size, pool, stream),
        )
    }
}

pub unsafe fn cuMemFree_v2(ptr: CUdeviceptr) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::free(Api::cuMemFree_v2, ptr as *mut c_void, None, |p| {
            real::cuMemFree_v2(p as CUdeviceptr)
        })
    }
}

pub unsafe fn cuMemFreeAsync(ptr: CUdeviceptr, stream: CUstream) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::free(
            Api::cuMemFreeAsync,
            ptr as *mut c_void,
            Some(stream.cast()),
            |p| real::cuMemFreeAsync(p as CUdeviceptr, stream),
        )
    }
}

pub unsafe fn cuMemFreeAsync_ptsz(ptr: CUdeviceptr, stream: CUstream) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::free(
            Api::cuMemFreeAsync_ptsz,
            ptr as *mut c_void,
            Some(stream.cast()),
            |p| real::cuMemFreeAsync_ptsz(p as CUdeviceptr, stream),
        )
    }
}

pub unsafe fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::mem_get_info(Backend::Driver, free, total, |f, t| {
            real::cuMemGetInfo_v2(f, t)
        })
    }
}

// Physical memory of the virtual memory API (PyTorch's expandable
// segments): counted from creation until it is both released and
// unmapped, as the driver frees it. Reserving address space and
// granting access change no count: those calls are not hooked.
pub unsafe fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::mem_create(handle, size, prop, |prop| {
            real::cuMemCreate(handle, size, prop, flags)
        })
    }
}

pub unsafe fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe { super::mem_release(handle, || real::cuMemRelease(handle)) }
}

pub unsafe fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::mem_map(ptr, size, handle, || {
            real::cuMemMap(ptr, size, offset, handle, flags)
        })
    }
}

pub unsafe fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe { super::mem_unmap(ptr, size, || real::cuMemUnmap(ptr, size)) }
}

pub unsafe fn cudaIpcGetMemHandle(handle: *mut c_void, ptr: *mut c_void) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    let rc = unsafe { real::cudaIpcGetMemHandle(handle, ptr) };
    super::ipc_refused(Api::cudaIpcGetMemHandle, ptr as usize, rc);
    rc
}

pub unsafe fn cuIpcGetMemHandle(handle: *mut c_void, ptr: CUdeviceptr) -> CUresult {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    let rc = unsafe { real::cuIpcGetMemHandle(handle, ptr) };
    super::ipc_refused(Api::cuIpcGetMemHandle, ptr as usize, rc);
    rc
}
