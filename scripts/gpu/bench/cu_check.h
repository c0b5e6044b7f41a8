// What the probes share: the check of a driver call (on failure, the line,
// the call and CUDA's words for the error on stderr, and exit status 1), the
// first device made ready, and the host memory nearest it.
#pragma once
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
