// What each virtual-memory call of a move costs, split: cuMemMap,
// cuMemSetAccess and cuMemUnmap of host-located and device-located memory
// at one reserved address, after a kernel has used the mapping, with many
// other mappings in the process (as a job spilling tensor by tensor has).
// Also the host cost of making pinned memory three ways.
//   remap_cost [other mappings]
// Prints one JSON object per measure (median of 5, milliseconds). Everything
// it allocates is freed before it exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cu_check.h"
#define RT(call)                                                               \
    do {                                                                       \
        cudaError_t rc = (call);                                               \
        if (rc != cudaSuccess) {                                               \
            fprintf(stderr, "line %d %s: %s\n", __LINE__, #call, cudaGetErrorString(rc)); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

__global__ void touch(float *data, size_t n) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        data[i] += 1.0f;
}

// 0: the device, 1: host memory on NUMA node 0, 2: host memory anywhere.
static CUmemAllocationProp prop(int where) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = where == 0   ? CU_MEM_LOCATION_TYPE_DEVICE
                      : where == 1 ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                   : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
    return p;
}
static const char *names[] = {"device", "host_numa", "host"};

int main(int argc, char **argv) {
    int others = argc > 1 ? atoi(argv[1]) : 500;
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const size_t page = 2 << 20;
    cudaStream_t stream;
    RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // Other mappings: 2 MiB of device memory each.
    std::vector<CUdeviceptr> other_va(others);
    std::vector<CUmemGenericAllocationHandle> other_mem(others);
    CUmemAllocationProp dev = prop(0), host = prop(1);
    for (int i = 0; i < others; i++) {
        CU(cuMemAddressReserve(&other_va[i], page, page, 0, 0));
        CU(cuMemCreate(&other_mem[i], page, &dev, 0));
        CU(cuMemMap(other_va[i], page, 0, other_mem[i], 0));
        CU(cuMemSetAccess(other_va[i], page, &access, 1));
    }

    for (size_t mib : {2, 16, 64, 256}) {
        size_t bytes = mib << 20;
        for (int where = 0; where < 3; where++) {
            CUmemAllocationProp p = prop(where);
            std::vector<double> create, map, set, unmap, release, map2;
            for (int rep = 0; rep < 5; rep++) {
                CUdeviceptr va = 0, second = 0;
                CU(cuMemAddressReserve(&va, bytes, page, 0, 0));
                CU(cuMemAddressReserve(&second, bytes, page, 0, 0));
                CUmemGenericAllocationHandle h;
                double t0 = now_ms();
                CU(cuMemCreate(&h, bytes, &p, 0));
                double t1 = now_ms();
                CU(cuMemMap(va, bytes, 0, h, 0));
                double t2 = now_ms();
                CU(cuMemSetAccess(va, bytes, &access, 1));
                double t3 = now_ms();
                touch<<<264, 256, 0, stream>>>((float *)va, bytes / 4);
                RT(cudaStreamSynchronize(stream));
                // The same memory at a second address (a block's range while
                // its staging half holds the memory already).
                double t4 = now_ms();
                CU(cuMemMap(second, bytes, 0, h, 0));
                CU(cuMemSetAccess(second, bytes, &access, 1));
                double t5 = now_ms();
                touch<<<264, 256, 0, stream>>>((float *)second, bytes / 4);
                RT(cudaStreamSynchronize(stream));
                double t6 = now_ms();
                CU(cuMemUnmap(va, bytes));
                double t7 = now_ms();
                CU(cuMemUnmap(second, bytes));
                double t8 = now_ms();
                CU(cuMemRelease(h));
                double t9 = now_ms();
                CU(cuMemAddressFree(va, bytes));
                CU(cuMemAddressFree(second, bytes));
                create.push_back(t1 - t0);
                map.push_back(t2 - t1);
                set.push_back(t3 - t2);
                map2.push_back(t5 - t4);
                unmap.push_back(t7 - t6);
                release.push_back(t9 - t8);
            }
            printf("{\"what\": \"vmm\", \"mib\": %zu, \"memory\": \"%s\", \"others\": %d, "
                   "\"create_ms\": %.4f, \"map_ms\": %.4f, \"set_access_ms\": %.4f, "
                   "\"second_map_and_access_ms\": %.4f, \"unmap_ms\": %.4f, \"release_ms\": %.4f}\n",
                   mib, names[where], others, median(create), median(map),
                   median(set), median(map2), median(unmap), median(release));
        }
    }

    // Pinned host memory, three ways, 256 MiB.
    size_t bytes = 256 << 20;
    std::vector<double> numa, alloc, reg;
    for (int rep = 0; rep < 3; rep++) {
        CUmemGenericAllocationHandle h;
        double t0 = now_ms();
        CU(cuMemCreate(&h, bytes, &host, 0));
        double t1 = now_ms();
        CU(cuMemRelease(h));
        void *p = nullptr;
        double t2 = now_ms();
        RT(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
        double t3 = now_ms();
        RT(cudaFreeHost(p));
        void *m = aligned_alloc(page, bytes);
        for (size_t i = 0; i < bytes; i += 4096) ((char *)m)[i] = 1;
        double t4 = now_ms();
        RT(cudaHostRegister(m, bytes, cudaHostRegisterDefault));
        double t5 = now_ms();
        RT(cudaHostUnregister(m));
        free(m);
        numa.push_back(t1 - t0);
        alloc.push_back(t3 - t2);
        reg.push_back(t5 - t4);
    }
    printf("{\"what\": \"pinning\", \"mib\": 256, \"cuMemCreate_host_numa_ms\": %.2f, "
           "\"cudaHostAlloc_ms\": %.2f, \"cudaHostRegister_touched_ms\": %.2f}\n",
           median(numa), median(alloc), median(reg));

    for (int i = 0; i < others; i++) {
        CU(cuMemUnmap(other_va[i], page));
        CU(cuMemRelease(other_mem[i]));
        CU(cuMemAddressFree(other_va[i], page));
    }
    return 0;
}
