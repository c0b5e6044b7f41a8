/*
 * A fake cuBLASLt (libcublasLt.so) for testing how vramshare reads a
 * library call's operands: cublasLtMatmul launches one kernel through the
 * runtime, as the real one launches its own, and that kernel has no
 * parameter metadata (as cuBLAS's kernels have none), so only the call's
 * own pointers say which blocks it uses.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, void *stream);

static char gemm_kernel;

int cublasLtMatmul(void *handle, void *desc, const void *alpha, const void *a, void *a_layout, const void *b,
                   void *b_layout, const void *beta, const void *c, void *c_layout, void *d, void *d_layout,
                   const void *algo, void *workspace, size_t workspace_size, void *stream) {
    struct { const void *a, *b, *c; void *d; } packed = {a, b, c, d};
    void *args[1] = {&packed};
    dim3 grid = {8, 1, 1}, block = {256, 1, 1};
    return cudaLaunchKernel(&gemm_kernel, grid, block, args, 0, stream);
}
