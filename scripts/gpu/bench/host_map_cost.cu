// What setting the device's access to host-located memory costs, idle, by
// how that memory was made: about 12 us a MiB against under 1 for device
// memory (remap_batch.cu), as if host memory were mapped page by small
// page. Each measure maps 32 handles of host physical memory of one size,
// sets access to each, and unmaps them; with the location `numa` (the node
// nearest the device) or `host`, and read-write or read-only access.
// (A mapping at an offset into a larger handle is refused by the driver:
// cuMemMap's offset must be 0.)
//   host_map_cost
// Prints the driver's granularities for host memory, then one JSON object
// per measure: microseconds a window (median of five rounds of 32 windows).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

static CUmemAllocationProp host_prop(bool numa, int node) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = numa ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = numa ? node : 0;
    return p;
}

static void measure(const char *location, CUmemAllocationProp p, size_t handle_mib, size_t window_mib,
                    CUmemAccess_flags flags, bool device_memory) {
    const size_t windows = 32;
    size_t handle_bytes = handle_mib << 20, window = window_mib << 20;
    size_t per_handle = handle_bytes / window;
    std::vector<CUmemGenericAllocationHandle> handles((windows + per_handle - 1) / per_handle);
    for (auto &h : handles) {
        if (cuMemCreate(&h, handle_bytes, &p, 0) != CUDA_SUCCESS) {
            printf("{\"location\": \"%s\", \"handle_mib\": %zu, \"made\": false}\n", location, handle_mib);
            return;
        }
    }
    CUdeviceptr base;
    CU(cuMemAddressReserve(&base, windows * window, 2 << 20, 0, 0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = flags;
    std::vector<double> rounds;
    for (int round = 0; round < 5; round++) {
        double spent = 0;
        for (size_t i = 0; i < windows; i++) {
            CUdeviceptr at = base + i * window;
            CU(cuMemMap(at, window, (i % per_handle) * window, handles[i / per_handle], 0));
            double began = now_ms();
            CU(cuMemSetAccess(at, window, &access, 1));
            spent += now_ms() - began;
        }
        for (size_t i = 0; i < windows; i++) CU(cuMemUnmap(base + i * window, window));
        rounds.push_back(spent * 1000 / windows);
    }
    std::sort(rounds.begin(), rounds.end());
    printf("{\"memory\": \"%s\", \"handle_mib\": %zu, \"window_mib\": %zu, \"access\": \"%s\", "
           "\"us_a_window\": %.1f, \"us_a_mib\": %.2f}\n",
           device_memory ? "device" : location, handle_mib, window_mib,
           flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? "read" : "readwrite", rounds[2], rounds[2] / window_mib);
    fflush(stdout);
    CU(cuMemAddressFree(base, windows * window));
    for (auto h : handles) CU(cuMemRelease(h));
}

int main() {
    CUdevice dev = first_device();
    int node = host_numa_node(dev);
    for (bool numa : {true, false}) {
        CUmemAllocationProp p = host_prop(numa, node);
        size_t least = 0, recommended = 0;
        CU(cuMemGetAllocationGranularity(&least, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CU(cuMemGetAllocationGranularity(&recommended, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        printf("{\"location\": \"%s\", \"granularity_minimum\": %zu, \"granularity_recommended\": %zu}\n",
               numa ? "numa" : "host", least, recommended);
    }
    CUmemAllocationProp numa = host_prop(true, node), host = host_prop(false, node);
    CUmemAllocationProp device = pinned_prop(false, node);
    for (size_t window : {2, 4, 16, 64, 256}) {
        measure("numa", numa, window, window, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, false);
        measure("host", host, window, window, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, false);
        measure("numa", numa, window, window, CU_MEM_ACCESS_FLAGS_PROT_READ, false);
        measure("device", device, window, window, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, true);
    }
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
