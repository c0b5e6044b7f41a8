//! The FFI types and values of `cudart-sys` checked against NVIDIA's own
//! headers (`driver_types.h` and `cuda.h` from the `nvidia-cuda-runtime`
//! wheel), compiled here by the C compiler.

mod common;

use std::mem::{align_of, size_of};

use common::*;
use cudart_sys::*;

#[test]
fn ffi_matches_nvidias_headers() {
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
    matches_header("driver_types.h", &ours);
}

#[test]
fn driver_ffi_matches_nvidias_cuda_h() {
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
    matches_header("cuda.h", &ours);
}

/// Compiles a C program that prints each named value as NVIDIA's `header`
/// defines it, and checks it against ours.
fn matches_header(header: &str, ours: &[(&str, i64)]) {
    let Some(cu13) = nvidia_runtime() else { return };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let stem = header.trim_end_matches(".h");
    let source = dir.join(format!("{stem}.c"));
    let values: String = ours
        .iter()
        .map(|(name, _)| format!("    VALUE({name});\n"))
        .collect();
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <stddef.h>\n#include <{header}>\n\
             #define VALUE(x) printf(#x \" %lld\\n\", (long long)(x))\n\
             int main(void) {{\n{values}    return 0;\n}}\n"
        ),
    )
    .unwrap();
    let exe = dir.join(stem);
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
    for (name, value) in ours {
        assert_eq!(
            nvidia.get(name),
            Some(value),
            "{name}: NVIDIA's {header} against cudart-sys\n{text}"
        );
    }
}
