// The all-managed anchor of scripts/gpu/bench/run: a PyTorch pluggable allocator
// (torch.cuda.memory.CUDAPluggableAllocator, symbols um_alloc and um_free)
// that makes every allocation raw managed memory with no hints, what a user
// without vramshare would reach for to run a job larger than the GPU. With
// UM_MODE=host, each block is also advised to live on the host and be mapped
// for the GPU, as vramshare places a spilled block.
//   nvcc -O2 -shared -Xcompiler -fPIC -cudart shared -o um_alloc.so um_alloc.cu
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
static int host_mode = -1;
extern "C" void* um_alloc(size_t n, int dev, cudaStream_t s) {
  void* p = 0;
  if (host_mode < 0) { const char* m = getenv("UM_MODE"); host_mode = m && !strcmp(m, "host"); }
  if (cudaMallocManaged(&p, n, cudaMemAttachGlobal) != cudaSuccess) return 0;
  if (host_mode) {
    cudaMemLocation h; h.type = cudaMemLocationTypeHost; h.id = 0; cudaMemLocation d; d.type = cudaMemLocationTypeDevice; d.id = dev;
    cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, h);
    cudaMemAdvise(p, n, cudaMemAdviseSetAccessedBy, d);
  }
  return p;
}
extern "C" void um_free(void* p, size_t n, int dev, cudaStream_t s) { cudaFree(p); }
