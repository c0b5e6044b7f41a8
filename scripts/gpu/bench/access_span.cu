// Whether host memory mapped at neighbouring blocks costs less given the
// device's access in one cuMemSetAccess over the run than in one call a
// block. N host allocations of MIB each are mapped side by side in one
// reserved range, each with cuMemMap; then access is set either a block at
// a time ("each") or once over the whole run ("run"); then all are
// unmapped. With --busy, copies both ways (1 GiB each, 16 queued a way)
// keep the copy engines running through each round, as the spill tier's
// own copies do while it remaps.
//   access_span [--busy] [N [MIB...]]      (default 32, sizes 2 4 16 64)
// Prints one JSON object per size and way: milliseconds for the maps and
// access calls of all N blocks, median of 5. Everything it allocates is
// freed before it exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

int main(int argc, char **argv) {
    bool busy = argc > 1 && std::string(argv[1]) == "--busy";
    int first_arg = busy ? 2 : 1;
    int n = argc > first_arg ? atoi(argv[first_arg]) : 32;
    std::vector<size_t> sizes;
    for (int i = first_arg + 1; i < argc; i++) sizes.push_back(strtoull(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {2, 4, 16, 64};
    CUdevice dev = first_device();
    int numa = host_numa_node(dev);
    CUmemAllocationProp host = {};
    host.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    host.location.id = numa;
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const size_t GIB = 1u << 30;
    CUstream up, down;
    CU(cuStreamCreate(&up, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&down, CU_STREAM_NON_BLOCKING));
    CUdeviceptr dbuf = 0;
    void *hbuf = nullptr;
    if (busy) {
        CU(cuMemAlloc(&dbuf, 2 * GIB));
        CU(cuMemAllocHost(&hbuf, 2 * GIB));
    }
    const char *ways[] = {"each", "run"};
    for (size_t mib : sizes) {
        size_t bytes = mib << 20;
        CUdeviceptr range;
        CU(cuMemAddressReserve(&range, n * bytes, 2u << 20, 0, 0));
        std::vector<CUmemGenericAllocationHandle> handles(n);
        for (auto &h : handles) CU(cuMemCreate(&h, bytes, &host, 0));
        for (int way = 0; way < 2; way++) {
            std::vector<double> times;
            for (int round = 0; round < 5; round++) {
                if (busy) {
                    for (int i = 0; i < 16; i++) {
                        CU(cuMemcpyHtoDAsync(dbuf, (char *)hbuf + GIB, GIB, up));
                        CU(cuMemcpyDtoHAsync(hbuf, dbuf + GIB, GIB, down));
                    }
                }
                double began = now_ms();
                for (int i = 0; i < n; i++) {
                    CU(cuMemMap(range + i * bytes, bytes, 0, handles[i], 0));
                    if (way == 0) CU(cuMemSetAccess(range + i * bytes, bytes, &access, 1));
                }
                if (way == 1) CU(cuMemSetAccess(range, n * bytes, &access, 1));
                times.push_back(now_ms() - began);
                for (int i = 0; i < n; i++) CU(cuMemUnmap(range + i * bytes, bytes));
                CU(cuStreamSynchronize(up));
                CU(cuStreamSynchronize(down));
            }
            std::sort(times.begin(), times.end());
            printf("{\"mib\": %zu, \"blocks\": %d, \"busy\": %s, \"access\": \"%s\", \"ms\": %.2f}\n",
                   mib, n, busy ? "true" : "false", ways[way], times[2]);
            fflush(stdout);
        }
        for (auto h : handles) CU(cuMemRelease(h));
        CU(cuMemAddressFree(range, n * bytes));
    }
    if (busy) {
        CU(cuMemFree(dbuf));
        CU(cuMemFreeHost(hbuf));
    }
    CU(cuStreamDestroy(up));
    CU(cuStreamDestroy(down));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
