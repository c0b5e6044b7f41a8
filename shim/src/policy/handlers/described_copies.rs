//! The handlers of copies described by a struct: the runtime's
//! `cudaMemcpy3D…` (`cudaMemcpy3DParms`) and the driver's `cuMemcpy2D…`
//! (`CUDA_MEMCPY2D`) and `cuMemcpy3D…` (`CUDA_MEMCPY3D`). Each names the
//! blocks its device pointers point into, then makes the call; the struct
//! is only read, at the offsets CUDA's headers give on 64-bit machines.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::c_void;

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;

/// `CU_MEMORYTYPE_DEVICE` and `CU_MEMORYTYPE_UNIFIED`: the end is the
/// struct's device pointer.
const DEVICE: u32 = 2;
const UNIFIED: u32 = 4;

/// Where a descriptor keeps an end's memory type and device pointer.
struct End {
    memory_type: usize,
    device: usize,
}

/// `CUDA_MEMCPY2D`: the source's, then the destination's.
const COPY_2D: [End; 2] = [
    End {
        memory_type: 16,
        device: 32,
    },
    End {
        memory_type: 72,
        device: 88,
    },
];
/// `CUDA_MEMCPY3D`.
const COPY_3D: [End; 2] = [
    End {
        memory_type: 32,
        device: 48,
    },
    End {
        memory_type: 120,
        device: 136,
    },
];
/// `cudaMemcpy3DParms`: `srcPtr.ptr` and `dstPtr.ptr` (any pointer: the
/// runtime tells the kind by the address).
const PARAMS_3D: [usize; 2] = [32, 96];

/// The device pointers of a driver descriptor at `copy` laid out as `ends`.
///
/// # Safety
/// `copy` is null or the caller's descriptor, as the driver receives it.
unsafe fn driver_operands(copy: *const c_void, ends: &[End; 2]) -> Vec<u64> {
    if copy.is_null() {
        return Vec::new();
    }
    let bytes = copy.cast::<u8>();
    ends.iter()
        .filter_map(|end| {
            // SAFETY: fields inside the caller's struct, read unaligned.
            let (kind, ptr) = unsafe {
                (
                    bytes.add(end.memory_type).cast::<u32>().read_unaligned(),
                    bytes.add(end.device).cast::<u64>().read_unaligned(),
                )
            };
            matches!(kind, DEVICE | UNIFIED).then_some(ptr)
        })
        .collect()
}

/// The two pointers of a runtime `cudaMemcpy3DParms` at `params`.
///
/// # Safety
/// `params` is null or the caller's struct, as the runtime receives it.
unsafe fn runtime_operands(params: *const c_void) -> Vec<u64> {
    if params.is_null() {
        return Vec::new();
    }
    let bytes = params.cast::<u8>();
    PARAMS_3D
        .iter()
        // SAFETY: fields inside the caller's struct, read unaligned.
        .map(|&at| unsafe { bytes.add(at).cast::<u64>().read_unaligned() })
        .collect()
}

macro_rules! runtime_3d {
    ($($name:ident($($stream:ident)?);)*) => {$(
        pub unsafe fn $name(params: *const c_void $(, $stream: cudaStream_t)?) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            // SAFETY: the caller's struct, as the runtime receives it.
            let operands = unsafe { runtime_operands(params) };
            super::super::copy_call(Api::$name, &operands, stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(params $(, $stream)?) }
            })
        }
    )*};
}

runtime_3d! {
    cudaMemcpy3D();
    cudaMemcpy3DAsync(stream);
    cudaMemcpy3DAsync_ptsz(stream);
    cudaMemcpy3D_ptds();
}

macro_rules! driver_described {
    ($($name:ident($ends:ident $(, $stream:ident)?);)*) => {$(
        pub unsafe fn $name(copy: *const c_void $(, $stream: CUstream)?) -> cudaError_t {
            let stream = 0usize $(+ $stream as usize)?;
            // SAFETY: the caller's descriptor, as the driver receives it.
            let operands = unsafe { driver_operands(copy, &$ends) };
            super::super::copy_call(Api::$name, &operands, stream, || {
                // SAFETY: the caller's arguments, as CUDA would receive them.
                unsafe { real::$name(copy $(, $stream)?) }
            })
        }
    )*};
}

driver_described! {
    cuMemcpy2D_v2(COPY_2D);
    cuMemcpy2DUnaligned_v2(COPY_2D);
    cuMemcpy2DAsync_v2(COPY_2D, stream);
    cuMemcpy3D_v2(COPY_3D);
    cuMemcpy3DAsync_v2(COPY_3D, stream);
    cuMemcpy2D_v2_ptds(COPY_2D);
    cuMemcpy2DUnaligned_v2_ptds(COPY_2D);
    cuMemcpy2DAsync_v2_ptsz(COPY_2D, stream);
    cuMemcpy3D_v2_ptds(COPY_3D);
    cuMemcpy3DAsync_v2_ptsz(COPY_3D, stream);
}
