// Whether mapping host-located memory for the device costs less in fewer
// calls: BLOCKS blocks of MIB each, side by side in one reserved range, each
// with its own host memory handle (as the spill tier's blocks have), mapped
//   each:  cuMemMap + cuMemSetAccess block by block (what a move out does);
//   batch: cuMemMap block by block, then one cuMemSetAccess over them all;
// and unmapped block by block, or in one cuMemUnmap over them all; with the
// copy engines idle, then while they carry copies each way.
//   remap_batch [BLOCKS [MIB]]
// Prints one JSON object per measure (milliseconds for all the blocks,
// median of 3). Everything it allocates is freed before it exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

struct Blocks {
    CUdeviceptr base = 0;
    size_t bytes = 0;  // each block's
    std::vector<CUmemGenericAllocationHandle> handles;
};

static CUmemAccessDesc device_access(CUdevice dev) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

// Maps every block, its access set block by block (`batch` false) or once
// over the whole range; the time taken.
static double map(const Blocks &b, const CUmemAccessDesc &access, bool batch) {
    double began = now_ms();
    for (size_t i = 0; i < b.handles.size(); i++) {
        CUdeviceptr at = b.base + i * b.bytes;
        CU(cuMemMap(at, b.bytes, 0, b.handles[i], 0));
        if (!batch) CU(cuMemSetAccess(at, b.bytes, &access, 1));
    }
    if (batch) CU(cuMemSetAccess(b.base, b.bytes * b.handles.size(), &access, 1));
    return now_ms() - began;
}

// Unmaps every block, block by block (`batch` false) or in one call; the
// time taken, or -1 if the one call was refused (the blocks are then
// unmapped one by one, untimed).
static double unmap(const Blocks &b, bool batch) {
    double began = now_ms();
    if (batch && cuMemUnmap(b.base, b.bytes * b.handles.size()) == CUDA_SUCCESS) return now_ms() - began;
    for (size_t i = 0; i < b.handles.size(); i++) CU(cuMemUnmap(b.base + i * b.bytes, b.bytes));
    return batch ? -1 : now_ms() - began;
}

static void measure(const Blocks &b, const CUmemAccessDesc &access, bool batch, const char *beside) {
    std::vector<double> map_ms, unmap_ms;
    for (int round = 0; round < 3; round++) {
        map_ms.push_back(map(b, access, batch));
        unmap_ms.push_back(unmap(b, batch));
    }
    std::sort(map_ms.begin(), map_ms.end());
    std::sort(unmap_ms.begin(), unmap_ms.end());
    printf("{\"how\": \"%s\", \"blocks\": %zu, \"mib\": %zu, \"beside\": \"%s\", "
           "\"map_and_access_ms\": %.3f, \"unmap_ms\": %.3f}\n",
           batch ? "batch" : "each", b.handles.size(), b.bytes >> 20, beside, map_ms[1], unmap_ms[1]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    size_t blocks = argc > 1 ? atoi(argv[1]) : 16;
    size_t bytes = size_t(argc > 2 ? atoi(argv[2]) : 16) << 20;
    CUdevice dev = first_device();
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = host_numa_node(dev);
    Blocks b;
    b.bytes = bytes;
    b.handles.resize(blocks);
    for (auto &handle : b.handles) CU(cuMemCreate(&handle, bytes, &p, 0));
    CU(cuMemAddressReserve(&b.base, bytes * blocks, 2 << 20, 0, 0));
    CUmemAccessDesc access = device_access(dev);
    for (bool batch : {false, true}) measure(b, access, batch, "idle");
    {
        // The same while the copy engines carry 2 GiB copies each way, 32
        // of them (about 1.3 s at 51 GB/s, longer than the measures).
        BusyCopies busy(size_t(2) << 30);
        for (bool batch : {false, true}) {
            busy.queue(32);
            measure(b, access, batch, "copies");
            busy.wait();
        }
    }
    CU(cuMemAddressFree(b.base, bytes * blocks));
    for (auto handle : b.handles) CU(cuMemRelease(handle));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
