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
#include <string.h>

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

/* cuBLAS's cublasGemmEx and cublasSetStream_v2, beside it (PyTorch's products
 * without a bias go through cublasGemmEx): the call carries no stream, its
 * handle does, so only the kernel it launches says where it runs. That kernel
 * runs (on the handle's stream, when its turn comes) and sets the first m * n
 * bytes of C to A's first byte plus B's, summed in the handle's workspace
 * when one is set: what it read, and when, shows in C.
 * Its parameter metadata is the fake runtime's own, to run it with its
 * arguments; vramshare does not read a library's kernels' parameters. */
void cudaFakeSetKernel(const void *kernel, void (*body)(void **args));
void cudaFakeSetParams(const void *kernel, int count, const size_t *sizes);

struct fake_handle { void *stream; void *workspace; };
int cublasSetStream_v2(void *handle, void *stream) {
    if (!handle) return 1; /* CUBLAS_STATUS_NOT_INITIALIZED */
    ((struct fake_handle *)handle)->stream = stream;
    return 0;
}

/* A workspace set on the handle is where the product's kernel sums before
 * it writes C, as cuBLAS's split-K kernels do: a pointer no operand of the
 * call shows. */
int cublasSetWorkspace_v2(void *handle, void *workspace, size_t size) {
    if (!handle) return 1;
    ((struct fake_handle *)handle)->workspace = size ? workspace : NULL;
    return 0;
}

static char product_kernel;
struct product { const unsigned char *a, *b; unsigned char *c; size_t bytes; unsigned char *workspace; };
static void product_body(void **args) {
    struct product *p = (struct product *)args[0];
    unsigned char sum = p->a[0] + p->b[0];
    if (p->workspace) {
        p->workspace[0] = sum;
        sum = p->workspace[0];
    }
    memset(p->c, sum, p->bytes);
}

int cublasGemmEx(void *handle, int transa, int transb, int m, int n, int k, const void *alpha, const void *a,
                 int a_type, int lda, const void *b, int b_type, int ldb, const void *beta, void *c, int c_type,
                 int ldc, int compute, int algo) {
    static int described;
    if (!described) {
        size_t sizes[1] = {sizeof(struct product)};
        cudaFakeSetParams(&product_kernel, 1, sizes);
        cudaFakeSetKernel(&product_kernel, product_body);
        described = 1;
    }
    if (!handle || m < 0 || n < 0) return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    struct fake_handle *h = (struct fake_handle *)handle;
    struct product packed = {a, b, c, (size_t)m * (size_t)n, h->workspace};
    void *args[1] = {&packed};
    dim3 grid = {8, 1, 1}, block = {256, 1, 1};
    int rc = cudaLaunchKernel(&product_kernel, grid, block, args, 0, h->stream);
    return rc ? 13 /* CUBLAS_STATUS_EXECUTION_FAILED */ : 0;
}
