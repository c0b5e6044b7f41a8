// Can this driver make physical memory on the host with cuMemCreate and map
// it for the GPU (what vramshare tries for an over-quota cuMemCreate)?
// Prints the device's NUMA attributes and, for each location form and
// handle type, cuMemCreate's result; where it succeeds, maps the memory,
// grants the device access, writes it from the GPU and reads it back.
#include <cstdio>
#include <cuda.h>

int main() {
    cuInit(0);
    CUdevice dev;
    CUcontext ctx;
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    int driver = 0;
    cuDriverGetVersion(&driver);
    printf("driver API version %d\n", driver);
    for (int attr = 130; attr <= 145; attr++) {
        int v = -99;
        CUresult rc = cuDeviceGetAttribute(&v, (CUdevice_attribute)attr, dev);
        printf("attribute %d: rc %d value %d\n", attr, rc, v);
    }
    struct { const char *name; CUmemLocationType type; int id; int handles; } forms[] = {
        {"device", CU_MEM_LOCATION_TYPE_DEVICE, 0, 0},
        {"host_numa id 0", CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0},
        {"host_numa id 0, posix fd", CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR},
        {"host", CU_MEM_LOCATION_TYPE_HOST, 0, 0},
        {"host, posix fd", CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR},
        {"host_numa_current", CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, 0},
    };
    for (auto &f : forms) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = f.type;
        prop.location.id = f.id;
        prop.requestedHandleTypes = (CUmemAllocationHandleType)f.handles;
        size_t gran = 0;
        CUresult grc = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        size_t size = 32u << 20;
        CUmemGenericAllocationHandle h;
        CUresult rc = cuMemCreate(&h, size, &prop, 0);
        const char *err = "";
        cuGetErrorName(rc, &err);
        printf("%-28s granularity rc %d (%zu)  cuMemCreate rc %d %s", f.name, grc, gran, rc, err);
        if (rc == CUDA_SUCCESS) {
            CUdeviceptr p;
            CUresult r1 = cuMemAddressReserve(&p, size, 0, 0, 0);
            CUresult r2 = cuMemMap(p, size, 0, h, 0);
            CUmemAccessDesc access = {};
            access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            access.location.id = 0;
            access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            CUresult r3 = cuMemSetAccess(p, size, &access, 1);
            CUresult r4 = cuMemsetD8(p, 0x5a, size);
            unsigned char back[4] = {0};
            CUresult r5 = cuMemcpyDtoH(back, p + size - 4, 4);
            printf("  reserve %d map %d access %d memset %d read %d byte 0x%02x", r1, r2, r3, r4, r5, back[3]);
            cuMemUnmap(p, size);
            cuMemAddressFree(p, size);
            cuMemRelease(h);
        }
        printf("\n");
    }
    return 0;
}
