//! The handlers of copies and memsets: each names the blocks its device
//! operands point into (a use, as a kernel's), then makes the call.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;

/// The runtime's copies: both ends may be device memory.
macro_rules! runtime_copies {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(
            dst: *mut c_void,
            src: *const c_void,
            count: usize,
            kind: c_int,
            $($stream: cudaStream_t,)?
        ) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            super::super::copy_call(Api::$name, &[dst as u64, src as u64], stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, src, count, kind $(, $stream)?) }
            })
        }
    )*};
}

runtime_copies! {
    cudaMemcpy();
    cudaMemcpyAsync(stream);
    cudaMemcpyAsync_ptsz(stream);
    cudaMemcpy_ptds();
}

macro_rules! runtime_memsets {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(
            ptr: *mut c_void,
            value: c_int,
            count: usize,
            $($stream: cudaStream_t,)?
        ) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            super::super::copy_call(Api::$name, &[ptr as u64], stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(ptr, value, count $(, $stream)?) }
            })
        }
    )*};
}

runtime_memsets! {
    cudaMemset();
    cudaMemsetAsync(stream);
    cudaMemsetAsync_ptsz(stream);
    cudaMemset_ptds();
}

/// The driver's asynchronous copies, by the types of their two ends.
macro_rules! driver_copies {
    ($($name:ident($dst:ty, $src:ty);)*) => {$(
        pub unsafe fn $name(dst: $dst, src: $src, count: usize, stream: CUstream) -> cudaError_t {
            let operands = [dst as u64, src as u64];
            super::super::copy_call(Api::$name, &operands, stream as usize, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, src, count, stream) }
            })
        }
    )*};
}

driver_copies! {
    cuMemcpyAsync(CUdeviceptr, CUdeviceptr);
    cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void);
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr);
    cuMemcpyAsync_ptsz(CUdeviceptr, CUdeviceptr);
    cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, *const c_void);
    cuMemcpyDtoHAsync_v2_ptsz(*mut c_void, CUdeviceptr);
    cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr, CUdeviceptr);
}

macro_rules! driver_memsets {
    ($($name:ident($value:ty);)*) => {$(
        pub unsafe fn $name(dst: CUdeviceptr, value: $value, count: usize, stream: CUstream) -> cudaError_t {
            super::super::copy_call(Api::$name, &[dst as u64], stream as usize, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, value, count, stream) }
            })
        }
    )*};
}

driver_memsets! {
    cuMemsetD8Async(u8);
    cuMemsetD32Async(c_uint);
    cuMemsetD8Async_ptsz(u8);
    cuMemsetD32Async_ptsz(c_uint);
}

/// The runtime's copies of rows (`cudaMemcpy2D…`): the rows' first bytes
/// name the blocks.
macro_rules! runtime_copies_2d {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(
            dst: *mut c_void,
            dpitch: usize,
            src: *const c_void,
            spitch: usize,
            width: usize,
            height: usize,
            kind: c_int,
            $($stream: cudaStream_t,)?
        ) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            super::super::copy_call(Api::$name, &[dst as u64, src as u64], stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, dpitch, src, spitch, width, height, kind $(, $stream)?) }
            })
        }
    )*};
}

runtime_copies_2d! {
    cudaMemcpy2D();
    cudaMemcpy2DAsync(stream);
    cudaMemcpy2DAsync_ptsz(stream);
    cudaMemcpy2D_ptds();
}

macro_rules! runtime_memsets_2d {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(
            ptr: *mut c_void,
            pitch: usize,
            value: c_int,
            width: usize,
            height: usize,
            $($stream: cudaStream_t,)?
        ) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            super::super::copy_call(Api::$name, &[ptr as u64], stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(ptr, pitch, value, width, height $(, $stream)?) }
            })
        }
    )*};
}

runtime_memsets_2d! {
    cudaMemset2D();
    cudaMemset2DAsync(stream);
    cudaMemset2DAsync_ptsz(stream);
    cudaMemset2D_ptds();
}

macro_rules! runtime_peer_copies {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(
            dst: *mut c_void,
            dst_device: c_int,
            src: *const c_void,
            src_device: c_int,
            count: usize,
            $($stream: cudaStream_t,)?
        ) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            super::super::copy_call(Api::$name, &[dst as u64, src as u64], stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, dst_device, src, src_device, count $(, $stream)?) }
            })
        }
    )*};
}

runtime_peer_copies! {
    cudaMemcpyPeer();
    cudaMemcpyPeerAsync(stream);
}

/// The driver's synchronous copies (on the null stream), by the types of
/// their two ends.
macro_rules! driver_sync_copies {
    ($($name:ident($dst:ty, $src:ty);)*) => {$(
        pub unsafe fn $name(dst: $dst, src: $src, count: usize) -> cudaError_t {
            super::super::copy_call(Api::$name, &[dst as u64, src as u64], 0, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, src, count) }
            })
        }
    )*};
}

driver_sync_copies! {
    cuMemcpy(CUdeviceptr, CUdeviceptr);
    cuMemcpyHtoD_v2(CUdeviceptr, *const c_void);
    cuMemcpyDtoH_v2(*mut c_void, CUdeviceptr);
    cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr);
    cuMemcpy_ptds(CUdeviceptr, CUdeviceptr);
    cuMemcpyHtoD_v2_ptds(CUdeviceptr, *const c_void);
    cuMemcpyDtoH_v2_ptds(*mut c_void, CUdeviceptr);
    cuMemcpyDtoD_v2_ptds(CUdeviceptr, CUdeviceptr);
}

macro_rules! driver_sync_memsets {
    ($($name:ident($value:ty);)*) => {$(
        pub unsafe fn $name(dst: CUdeviceptr, value: $value, count: usize) -> cudaError_t {
            super::super::copy_call(Api::$name, &[dst as u64], 0, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(dst, value, count) }
            })
        }
    )*};
}

driver_sync_memsets! {
    cuMemsetD8_v2(u8);
    cuMemsetD32_v2(c_uint);
    cuMemsetD8_v2_ptds(u8);
    cuMemsetD32_v2_ptds(c_uint);
}
