// A copy out of the device made by a kernel: each of the grid's threads
// copies 16 bytes a turn, from device memory to host memory mapped for the
// device. For the probes that set it beside the copy engine's copies
// (kernel_copy.cu, vm_beside.cu).
#pragma once
#include <cstddef>

__global__ void copy_out(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n) {
    size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
