// A CUDA C program for the allocation matrix: eight 256 MiB blocks from
// cudaMalloc, filled and checked by kernels, held for a moment at the peak.
// Built twice by scripts/gpu/matrix: with nvcc's default static runtime and
// with -cudart shared. Prints one JSON line; with --expect-oom it must meet
// cudaErrorMemoryAllocation (spill off under a small quota).
#include <cstdio>
#include <cstring>
#include <unistd.h>

__global__ void fill(unsigned *p, size_t n, unsigned value) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value ^ (unsigned)i;
}

__global__ void check(const unsigned *p, size_t n, unsigned value, unsigned long long *bad) {
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) mine += p[i] != (value ^ (unsigned)i);
    if (mine) atomicAdd(bad, mine);
}

int main(int argc, char **argv) {
    bool expect_oom = argc > 1 && !strcmp(argv[1], "--expect-oom");
    const int blocks = 8;
    const size_t n = (256u << 20) / sizeof(unsigned);
    unsigned *p[blocks];
    unsigned long long *bad;
    cudaMalloc(&bad, sizeof *bad);
    cudaMemset(bad, 0, sizeof *bad);
    for (int b = 0; b < blocks; b++) {
        cudaError_t rc = cudaMalloc(&p[b], n * sizeof(unsigned));
        if (rc != cudaSuccess) {
            printf("{\"oom\": %s, \"block\": %d, \"error\": \"%s\"}\n", rc == cudaErrorMemoryAllocation ? "true" : "false", b, cudaGetErrorName(rc));
            return rc == cudaErrorMemoryAllocation && expect_oom ? 0 : 1;
        }
        fill<<<1024, 256>>>(p[b], n, 0x9e3779b9u * (b + 1));
    }
    for (int b = 0; b < blocks; b++) check<<<1024, 256>>>(p[b], n, 0x9e3779b9u * (b + 1), bad);
    unsigned long long wrong = 0;
    cudaError_t rc = cudaMemcpy(&wrong, bad, sizeof wrong, cudaMemcpyDeviceToHost);
    sleep(2);  // held at the peak, for the samplers
    for (int b = 0; b < blocks; b++) cudaFree(p[b]);
    printf("{\"ok\": %s, \"wrong\": %llu, \"rc\": %d}\n", rc == cudaSuccess && wrong == 0 && !expect_oom ? "true" : "false", wrong, (int)rc);
    return expect_oom || rc != cudaSuccess || wrong ? 1 : 0;
}
