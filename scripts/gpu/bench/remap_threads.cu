// Whether the remaps of several blocks can run at once: mapping host-located
// memory for the device (cuMemMap + cuMemSetAccess) and unmapping it, for
// BLOCKS blocks of MIB each, split over 1, 2, 4 and 8 threads, each block at
// its own reserved range; the same with device memory; and the host
// mappings again while a large copy runs on the copy engines. With
// CONTEXTS=own each thread works in a context of its own (made with
// cuCtxCreate before the measures), not the device's primary one: whether
// the driver runs one context's remaps beside another's.
//   remap_threads [BLOCKS [MIB]]
// Prints one JSON object per measure (milliseconds for all the blocks,
// median of 3). Everything it allocates is freed before it exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

static CUcontext context;
// The contexts of the threads, by thread: all the primary one, or each its
// own (CONTEXTS=own).
static std::vector<CUcontext> contexts;

// Maps (or unmaps) blocks [first, last) on the calling thread, in `own`.
static void work(CUcontext own, bool map, const std::vector<CUdeviceptr> &at,
                 const std::vector<CUmemGenericAllocationHandle> &handles, size_t bytes,
                 size_t first, size_t last) {
    CU(cuCtxSetCurrent(own));
    for (size_t i = first; i < last; i++) {
        if (map) {
            map_for_device(at[i], bytes, handles[i]);
        } else {
            CU(cuMemUnmap(at[i], bytes));
        }
    }
}

// The time to map (or unmap) every block, split over `threads`.
static double timed(int threads, bool map, const std::vector<CUdeviceptr> &at,
                    const std::vector<CUmemGenericAllocationHandle> &handles, size_t bytes) {
    double began = now_ms();
    std::vector<std::thread> pool;
    size_t share = (at.size() + threads - 1) / threads;
    for (int t = 0; t < threads; t++) {
        size_t first = std::min(at.size(), t * share), last = std::min(at.size(), first + share);
        pool.emplace_back(work, contexts[t], map, std::cref(at), std::cref(handles), bytes, first,
                          last);
    }
    for (auto &thread : pool) thread.join();
    return now_ms() - began;
}

static void measure(const char *memory, int threads, const std::vector<CUdeviceptr> &at,
                    const std::vector<CUmemGenericAllocationHandle> &handles, size_t bytes,
                    const char *beside) {
    std::vector<double> map_ms, unmap_ms;
    for (int round = 0; round < 3; round++) {
        map_ms.push_back(timed(threads, true, at, handles, bytes));
        unmap_ms.push_back(timed(threads, false, at, handles, bytes));
    }
    std::sort(map_ms.begin(), map_ms.end());
    std::sort(unmap_ms.begin(), unmap_ms.end());
    printf("{\"memory\": \"%s\", \"threads\": %d, \"contexts\": \"%s\", \"blocks\": %zu, \"mib\": %zu, "
           "\"beside\": \"%s\", \"map_and_access_ms\": %.3f, \"unmap_ms\": %.3f}\n",
           memory, threads, contexts[0] == context ? "primary" : "own", at.size(), bytes >> 20, beside,
           map_ms[1], unmap_ms[1]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    size_t blocks = argc > 1 ? atoi(argv[1]) : 32;
    size_t bytes = size_t(argc > 2 ? atoi(argv[2]) : 64) << 20;
    CU(cuInit(0));
    CUdevice device;
    CU(cuDeviceGet(&device, 0));
    CU(cuDevicePrimaryCtxRetain(&context, device));
    const char *own = getenv("CONTEXTS");
    bool own_contexts = own && !strcmp(own, "own");
    for (int t = 0; t < 8; t++) {
        CUcontext made = context;
        if (own_contexts) CU(cuCtxCreate(&made, nullptr, 0, device));
        contexts.push_back(made);
    }
    CU(cuCtxSetCurrent(context));
    for (bool host : {true, false}) {
        CUmemAllocationProp p = pinned_prop(host, 0);
        std::vector<CUmemGenericAllocationHandle> handles(blocks);
        std::vector<CUdeviceptr> at(blocks);
        for (size_t i = 0; i < blocks; i++) {
            CU(cuMemCreate(&handles[i], bytes, &p, 0));
            CU(cuMemAddressReserve(&at[i], bytes, 2 << 20, 0, 0));
        }
        for (int threads : {1, 2, 4, 8})
            measure(host ? "host" : "device", threads, at, handles, bytes, "idle");
        if (host) {
            // The same while the copy engines carry 4 GiB copies each way,
            // 16 of them (about 1.3 s, longer than the three rounds).
            BusyCopies busy(size_t(4) << 30);
            for (int threads : {1, 4}) {
                busy.queue(16);
                measure("host", threads, at, handles, bytes, "copies");
                busy.wait();
            }
        }
        for (size_t i = 0; i < blocks; i++) {
            CU(cuMemAddressFree(at[i], bytes));
            CU(cuMemRelease(handles[i]));
        }
    }
    for (CUcontext made : contexts)
        if (made != context) CU(cuCtxDestroy(made));
    CU(cuDevicePrimaryCtxRelease(device));
    return 0;
}
