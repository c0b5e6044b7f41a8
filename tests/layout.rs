//! The FFI types and values of `cudart-sys` checked against NVIDIA's own
//! headers (`driver_types.h` and `cuda.h` from the `nvidia-cuda-runtime`
//! wheel), compiled here by the C compiler.

mod common;

use std::mem::{align_of, size_of};

use common::*;
use cudart_sys::*;

#[test]
fn ffi_matches_nvidias_headers() {
    let Some(cu13) = nvidia_runtime() else { return };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("layout.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <driver_types.h>
#define VALUE(x) printf(#x " %lld\n", (long long)(x))
int main(void) {
    VALUE(cudaSuccess); VALUE(cudaErrorInvalidValue); VALUE(cudaErrorMemoryAllocation);
    VALUE(cudaErrorInitializationError); VALUE(cudaErrorInsufficientDriver);
    VALUE(cudaErrorNoDevice); VALUE(cudaErrorNotSupported);
    VALUE(cudaMemAdviseSetPreferredLocation); VALUE(cudaMemAdviseSetAccessedBy);
    VALUE(cudaMemLocationTypeDevice); VALUE(cudaMemLocationTypeHost); VALUE(cudaMemLocationTypeHostNuma);
    VALUE(cudaCpuDeviceId); VALUE(cudaMemAttachGlobal); VALUE(cudaMemAttachHost); VALUE(cudaStreamNonBlocking);
    VALUE(sizeof(cudaError_t)); VALUE(sizeof(enum cudaMemoryAdvise)); VALUE(sizeof(cudaStream_t));
    VALUE(sizeof(struct cudaMemLocation)); VALUE(_Alignof(struct cudaMemLocation));
    VALUE(sizeof(struct cudaExtent)); VALUE(sizeof(struct cudaPitchedPtr));
    VALUE(offsetof(struct cudaMemLocation, id)); VALUE(offsetof(struct cudaPitchedPtr, pitch));
    VALUE(offsetof(struct cudaPitchedPtr, ysize)); VALUE(offsetof(struct cudaExtent, depth));
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("layout");
    cc(&[
        "-std=c11",
        "-include",
        "stddef.h",
        "-o",
        exe.to_str().unwrap(),
        source.to_str().unwrap(),
        &format!("-I{}", cu13.join("include").display()),
    ]);
    let output = std::process::Command::new(&exe).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let nvidia: std::collections::HashMap<&str, i64> = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap())
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    let ours: [(&str, i64); 27] = [
        ("cudaSuccess", cudaSuccess as i64),
        ("cudaErrorInvalidValue", cudaErrorInvalidValue as i64),
        (
            "cudaErrorMemoryAllocation",
            cudaErrorMemoryAllocation as i64,
        ),
        (
            "cudaErrorInitializationError",
            cudaErrorInitializationError as i64,
        ),
        (
            "cudaErrorInsufficientDriver",
            cudaErrorInsufficientDriver as i64,
        ),
        ("cudaErrorNoDevice", cudaErrorNoDevice as i64),
        ("cudaErrorNotSupported", cudaErrorNotSupported as i64),
        (
            "cudaMemAdviseSetPreferredLocation",
            cudaMemAdviseSetPreferredLocation as i64,
        ),
        (
            "cudaMemAdviseSetAccessedBy",
            cudaMemAdviseSetAccessedBy as i64,
        ),
        (
            "cudaMemLocationTypeDevice",
            cudaMemLocationTypeDevice as i64,
        ),
        ("cudaMemLocationTypeHost", cudaMemLocationTypeHost as i64),
        (
            "cudaMemLocationTypeHostNuma",
            cudaMemLocationTypeHostNuma as i64,
        ),
        ("cudaCpuDeviceId", cudaCpuDeviceId as i64),
        ("cudaMemAttachGlobal", cudaMemAttachGlobal as i64),
        ("cudaMemAttachHost", cudaMemAttachHost as i64),
        ("cudaStreamNonBlocking", cudaStreamNonBlocking as i64),
        ("sizeof(cudaError_t)", size_of::<cudaError_t>() as i64),
        (
            "sizeof(enum cudaMemoryAdvise)",
            size_of::<cudaMemoryAdvise>() as i64,
        ),
        ("sizeof(cudaStream_t)", size_of::<cudaStream_t>() as i64),
        (
            "sizeof(struct cudaMemLocation)",
            size_of::<cudaMemLocation>() as i64,
        ),
        (
            "_Alignof(struct cudaMemLocation)",
            align_of::<cudaMemLocation>() as i64,
        ),
        ("sizeof(struct cudaExtent)", size_of::<cudaExtent>() as i64),
        (
            "sizeof(struct cudaPitchedPtr)",
            size_of::<cudaPitchedPtr>() as i64,
        ),
        (
            "offsetof(struct cudaMemLocation, id)",
            std::mem::offset_of!(cudaMemLocation, id) as i64,
        ),
        (
            "offsetof(struct cudaPitchedPtr, pitch)",
            std::mem::offset_of!(cudaPitchedPtr, pitch) as i64,
        ),
        (
            "offsetof(struct cudaPitchedPtr, ysize)",
            std::mem::offset_of!(cudaPitchedPtr, ysize) as i64,
        ),
        (
            "offsetof(struct cudaExtent, depth)",
            std::mem::offset_of!(cudaExtent, depth) as i64,
        ),
    ];
    for (name, value) in ours {
        assert_eq!(
            nvidia.get(name),
            Some(&value),
            "{name}: NVIDIA's header against cudart-sys\n{text}"
        );
    }
}

#[test]
fn driver_ffi_matches_nvidias_cuda_h() {
    let Some(cu13) = nvidia_runtime() else { return };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("driver_layout.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <stddef.h>
#include <cuda.h>
#define VALUE(x) printf(#x " %lld\n", (long long)(x))
int main(void) {
    VALUE(CUDA_SUCCESS); VALUE(CUDA_ERROR_INVALID_VALUE); VALUE(CUDA_ERROR_OUT_OF_MEMORY); VALUE(CUDA_ERROR_NOT_SUPPORTED);
    VALUE(CU_MEM_ADVISE_SET_PREFERRED_LOCATION); VALUE(CU_MEM_ADVISE_SET_ACCESSED_BY);
    VALUE(CU_MEM_LOCATION_TYPE_DEVICE); VALUE(CU_MEM_LOCATION_TYPE_HOST);
    VALUE(CU_DEVICE_CPU); VALUE(CU_MEM_ATTACH_GLOBAL); VALUE(CU_STREAM_NON_BLOCKING);
    VALUE(sizeof(CUdeviceptr)); VALUE(sizeof(CUdevice)); VALUE(sizeof(CUresult));
    VALUE(sizeof(CUmemLocation)); VALUE(offsetof(CUmemLocation, id));
    VALUE(sizeof(CUmemAllocationProp)); VALUE(offsetof(CUmemAllocationProp, location));
    VALUE(sizeof(CUmemGenericAllocationHandle));
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("driver_layout");
    cc(&[
        "-std=c11",
        "-o",
        exe.to_str().unwrap(),
        source.to_str().unwrap(),
        &format!("-I{}", cu13.join("include").display()),
    ]);
    let text =
        String::from_utf8(std::process::Command::new(&exe).output().unwrap().stdout).unwrap();
    let nvidia: std::collections::HashMap<&str, i64> = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap())
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    let ours: [(&str, i64); 19] = [
        ("CUDA_SUCCESS", CUDA_SUCCESS as i64),
        ("CUDA_ERROR_INVALID_VALUE", CUDA_ERROR_INVALID_VALUE as i64),
        ("CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY as i64),
        ("CUDA_ERROR_NOT_SUPPORTED", CUDA_ERROR_NOT_SUPPORTED as i64),
        (
            "CU_MEM_ADVISE_SET_PREFERRED_LOCATION",
            CU_MEM_ADVISE_SET_PREFERRED_LOCATION as i64,
        ),
        (
            "CU_MEM_ADVISE_SET_ACCESSED_BY",
            CU_MEM_ADVISE_SET_ACCESSED_BY as i64,
        ),
        (
            "CU_MEM_LOCATION_TYPE_DEVICE",
            CU_MEM_LOCATION_TYPE_DEVICE as i64,
        ),
        (
            "CU_MEM_LOCATION_TYPE_HOST",
            CU_MEM_LOCATION_TYPE_HOST as i64,
        ),
        ("CU_DEVICE_CPU", CU_DEVICE_CPU as i64),
        ("CU_MEM_ATTACH_GLOBAL", CU_MEM_ATTACH_GLOBAL as i64),
        ("CU_STREAM_NON_BLOCKING", CU_STREAM_NON_BLOCKING as i64),
        ("sizeof(CUdeviceptr)", size_of::<CUdeviceptr>() as i64),
        ("sizeof(CUdevice)", size_of::<CUdevice>() as i64),
        ("sizeof(CUresult)", size_of::<CUresult>() as i64),
        ("sizeof(CUmemLocation)", size_of::<CUmemLocation>() as i64),
        (
            "sizeof(CUmemAllocationProp)",
            size_of::<CUmemAllocationProp>() as i64,
        ),
        (
            "offsetof(CUmemAllocationProp, location)",
            std::mem::offset_of!(CUmemAllocationProp, location) as i64,
        ),
        (
            "sizeof(CUmemGenericAllocationHandle)",
            size_of::<CUmemGenericAllocationHandle>() as i64,
        ),
        (
            "offsetof(CUmemLocation, id)",
            std::mem::offset_of!(CUmemLocation, id) as i64,
        ),
    ];
    for (name, value) in ours {
        assert_eq!(
            nvidia.get(name),
            Some(&value),
            "{name}: NVIDIA's cuda.h against cudart-sys\n{text}"
        );
    }
}
