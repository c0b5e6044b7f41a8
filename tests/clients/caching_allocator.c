/*
 * A caching allocator in the manner of PyTorch's: freed blocks stay reserved
 * for later requests of the same size; when cudaMalloc fails, every cached
 * block is given back and the request is made once more. Built twice: as
 * libc10_cuda.so (the name of PyTorch's library) and under a plain name.
 */
#include "cuda_api.h"

#define CACHE_SLOTS 64
static struct { void *ptr; size_t size; } cache[CACHE_SLOTS];
static int cached, retries;

cudaError_t cache_malloc(void **out, size_t size) {
    for (int i = 0; i < cached; i++)
        if (cache[i].size == size) {
            *out = cache[i].ptr;
            cache[i] = cache[--cached];
            return 0;
        }
    cudaError_t rc = cudaMalloc(out, size);
    if (rc == 2 /* cudaErrorMemoryAllocation */) {
        while (cached > 0) cudaFree(cache[--cached].ptr);
        retries++;
        rc = cudaMalloc(out, size);
    }
    return rc;
}

void cache_free(void *ptr, size_t size) {
    if (cached < CACHE_SLOTS) {
        cache[cached].ptr = ptr;
        cache[cached++].size = size;
    } else {
        cudaFree(ptr);
    }
}

int cache_retries(void) { return retries; }
