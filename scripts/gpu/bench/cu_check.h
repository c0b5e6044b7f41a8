// What the probes share: the check of a driver call (on failure, the line,
// the call and CUDA's words for the error on stderr, and exit status 1), the
// first device made ready, and the host memory nearest it.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>

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

// The host NUMA node nearest `dev` (0 where the driver does not say).
static inline int host_numa_node(CUdevice dev) {
    int numa = 0;
    if (cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS || numa < 0)
        numa = 0;
    return numa;
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
