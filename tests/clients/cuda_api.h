/* The CUDA runtime declarations the test clients use, written out so that
 * the clients build without NVIDIA's headers (against the fake runtime or
 * the real libcudart.so.13 alike). */
#include <stddef.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
struct cudaExtent { size_t width, height, depth; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };

cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaMallocManaged(void **p, size_t size, unsigned flags);
cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent extent);
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s);
cudaError_t cudaMallocAsync_ptsz(void **p, size_t size, cudaStream_t s);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind, cudaStream_t s);
cudaError_t cudaMemset2D(void *p, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemset_ptds(void *p, int value, size_t n);
cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind);
cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, int attribute, void *value);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, int attribute, void *value);
cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s);
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaGetLastError(void);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, void **graph);
cudaError_t cudaGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
cudaError_t cudaGraphInstantiateWithParams(void **exec, void *graph, void *params);
cudaError_t cudaGraphExecDestroy(void *exec);
cudaError_t cudaGraphDestroy(void *graph);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
cudaError_t cudaEventCreate(void **e);
cudaError_t cudaEventRecord(void *e, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, void *e, unsigned flags);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s);
cudaError_t cudaIpcGetMemHandle(void *handle, void *p); /* handle: a cudaIpcMemHandle_t, 64 bytes */

typedef struct { unsigned x, y, z; } dim3;
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t __cudaLaunchKernel_ptsz(const void *kernel, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchKernelExC(const void *config, const void *func, void **args);
cudaError_t cudaLaunchKernelExC_ptsz(const void *config, const void *func, void **args);
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaGraphLaunch(void *graph, cudaStream_t s);
cudaError_t cudaGraphLaunch_ptsz(void *graph, cudaStream_t s);
