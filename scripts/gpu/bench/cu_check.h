// What the probes share: the check of a driver call (on failure, the line,
// the call and CUDA's words for the error on stderr, and exit status 1), the
// median of timings, the first device made ready, the host memory nearest
// it, a device's access to a mapping, physical memory and its mappings (a
// handle of a block's own made and mapped, and given back), the sizes a
// GPT-2 step moves out, moves out pipelined, and mappings whose access is
// set and timed.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include <cuda.h>

#define CU(call)                                                               \
    do {                                                                       \
        CUresult rc = (call);                                                  \
        if (rc != CUDA_SUCCESS) {                                              \
            const char *text = nullptr;                                        \
            cuGetErrorString(rc, &text);                                       \
            fprintf(stderr, "line %d %s: %s\n", __LINE__, #call, text ? text : "?"); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

// Milliseconds on a steady clock, for timing the calls a probe measures.
static inline double now_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// The median of a probe's repeated timings (the upper one of an even count).
static inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The first device, its primary context made current (released at exit
// with cuDevicePrimaryCtxRelease).
static inline CUdevice first_device() {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext context;
    CU(cuDevicePrimaryCtxRetain(&context, dev));
    CU(cuCtxSetCurrent(context));
    return dev;
}

// Read and write access for `dev` to a mapping, as every probe sets it.
static inline CUmemAccessDesc device_access(CUdevice dev) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

// The host NUMA node nearest `dev` (0 where the driver does not say).
static inline int host_numa_node(CUdevice dev) {
    int numa = 0;
    if (cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS || numa < 0)
        numa = 0;
    return numa;
}

// The sizes (MiB) a GPT-2 step moves out, in about their proportions by
// count: 4 MiB 5 in 21, 8 MiB 2, 12 and 16 MiB 5 each, 32 MiB 1.5, 64 MiB 1,
// 128 MiB 2 (see bench/RESULTS.md), one after another in a mixed order.
static const size_t GPT2_MOVE_MIX[] = {128, 4, 12, 16, 4, 8, 12, 16, 4, 32, 12, 16, 4, 64, 16, 12, 4, 8, 128, 16, 12};

// Handles of `bytes` each, mapped one after another over one reserved range
// by the probes of setting access: BLOCKS mappings.
struct Mappings {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    std::vector<CUmemGenericAllocationHandle> handles;
};

// `count` handles of `bytes` each, made as `p` says, and a range reserved
// for them all.
static inline Mappings make_mappings(size_t count, size_t bytes, const CUmemAllocationProp &p) {
    Mappings b;
    b.bytes = bytes;
    b.handles.resize(count);
    for (auto &handle : b.handles) CU(cuMemCreate(&handle, b.bytes, &p, 0));
    CU(cuMemAddressReserve(&b.base, b.bytes * count, 2 << 20, 0, 0));
    return b;
}

// The range and the handles given back.
static inline void free_mappings(const Mappings &b) {
    CU(cuMemAddressFree(b.base, b.bytes * b.handles.size()));
    for (auto handle : b.handles) CU(cuMemRelease(handle));
}

// Maps every handle, sets device 0's access to each (timed), then unmaps
// them all: milliseconds spent setting access.
static inline double access_round(const Mappings &b) {
    const CUmemAccessDesc access = device_access(0);
    double spent = 0;
    for (size_t i = 0; i < b.handles.size(); i++) {
        CUdeviceptr at = b.base + i * b.bytes;
        CU(cuMemMap(at, b.bytes, 0, b.handles[i], 0));
        double began = now_ms();
        CU(cuMemSetAccess(at, b.bytes, &access, 1));
        spent += now_ms() - began;
    }
    for (size_t i = 0; i < b.handles.size(); i++) CU(cuMemUnmap(b.base + i * b.bytes, b.bytes));
    return spent;
}

// The median of three rounds: milliseconds setting access to all of them.
static inline double access_ms(const Mappings &b) {
    std::vector<double> t;
    for (int round = 0; round < 3; round++) t.push_back(access_round(b));
    return median(t);
}

// Pinned physical memory on device 0, or in host memory on NUMA node `numa`.
static inline CUmemAllocationProp pinned_prop(bool host, int numa) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = host ? numa : 0;
    return p;
}

// Maps `bytes` of `handle` (from `offset` on) at `at`, for device 0 to read
// and write.
static inline void map_for_device(CUdeviceptr at, size_t bytes, CUmemGenericAllocationHandle handle,
                                  size_t offset = 0) {
    const CUmemAccessDesc access = device_access(0);
    CU(cuMemMap(at, bytes, offset, handle, 0));
    CU(cuMemSetAccess(at, bytes, &access, 1));
}

// A handle of `bytes` of its own made as `p` says, mapped at `at` and its
// access set: what the spill tier does for a block's memory.
static inline CUmemGenericAllocationHandle make_and_map(CUdeviceptr at, size_t bytes, const CUmemAllocationProp &p,
                                                        const CUmemAccessDesc &access) {
    CUmemGenericAllocationHandle handle;
    CU(cuMemCreate(&handle, bytes, &p, 0));
    CU(cuMemMap(at, bytes, 0, handle, 0));
    CU(cuMemSetAccess(at, bytes, &access, 1));
    return handle;
}

// `bytes` of host memory of the spill tier's kind (a HOST_NUMA handle on the
// node nearest `dev`) mapped for the device at a range of its own; the
// mapping keeps the memory.
static inline CUdeviceptr mapped_host_memory(CUdevice dev, size_t bytes) {
    CUmemAllocationProp prop = pinned_prop(true, host_numa_node(dev));
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, bytes, &prop, 0));
    CUdeviceptr at;
    CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
    map_for_device(at, bytes, h);
    CU(cuMemRelease(h));
    return at;
}

// The handle mapped at `at` unmapped and released.
static inline void unmap_and_release(CUdeviceptr at, size_t bytes, CUmemGenericAllocationHandle handle) {
    CU(cuMemUnmap(at, bytes));
    CU(cuMemRelease(handle));
}

// Moves `items` out in a pipeline: each one's copies queued (`queue`) while
// at most `window` are under way, the oldest finished (`finish`: its copies
// waited for, then remapped) to make way for the next.
template <typename T, typename Queue, typename Finish>
static void pipelined(std::vector<T> &items, size_t window, Queue queue, Finish finish) {
    std::deque<T *> under_way;
    for (T &item : items) {
        if (under_way.size() == window) {
            finish(*under_way.front());
            under_way.pop_front();
        }
        queue(item);
        under_way.push_back(&item);
    }
    for (T *item : under_way) finish(*item);
}

// Copies each way that keep the copy engines busy while a probe measures:
// `queue(count)` queues `count` copies of `bytes` each way, `wait()` waits
// for them. Device and pinned host memory of `bytes` each, freed with it.
struct BusyCopies {
    size_t bytes;
    CUdeviceptr device_side = 0;
    void *pinned = nullptr;
    CUstream in = nullptr, out = nullptr;
    explicit BusyCopies(size_t bytes) : bytes(bytes) {
        CU(cuMemAlloc(&device_side, bytes));
        CU(cuMemHostAlloc(&pinned, bytes, 0));
        CU(cuStreamCreate(&in, CU_STREAM_NON_BLOCKING));
        CU(cuStreamCreate(&out, CU_STREAM_NON_BLOCKING));
    }
    void queue(int count) {
        for (int i = 0; i < count; i++) {
            CU(cuMemcpyHtoDAsync(device_side, pinned, bytes, in));
            CU(cuMemcpyDtoHAsync(pinned, device_side, bytes, out));
        }
    }
    void wait() {
        CU(cuStreamSynchronize(in));
        CU(cuStreamSynchronize(out));
    }
    ~BusyCopies() {
        wait();
        CU(cuStreamDestroy(in));
        CU(cuStreamDestroy(out));
        CU(cuMemFreeHost(pinned));
        CU(cuMemFree(device_side));
    }
    BusyCopies(const BusyCopies &) = delete;
    BusyCopies &operator=(const BusyCopies &) = delete;
};
