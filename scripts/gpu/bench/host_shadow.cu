// Whether mapping host memory at a block's range costs less while the same
// handle stays mapped, its access set, at a second range of its own. Setting
// the device's access to host memory costs about 12 to 15 us a MiB and
// unmapping it about 4 (host_map_cost.cu, vm_beside.cu), as if each small
// page of host memory were made ready for the device anew at each mapping.
// If that work is the handle's rather than the range's, host memory kept
// mapped at a second range (a "shadow") would make the spill tier's moves
// out and back in cheaper by the byte.
//   nvcc -O2 -std=c++17 -arch=native -o /tmp/hs host_shadow.cu -lcuda && /tmp/hs [ROUNDS]
// For blocks of 2, 16 and 64 MiB of host memory: map, set access and unmap
// at one range, each call timed, with no other mapping of the handle, then
// with the handle mapped at a second range all the while (read-write, and
// read-only), then the same for device memory. Prints one JSON object per
// measure: the median microseconds of each call over ROUNDS (16) rounds of
// 8 handles.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cu_check.h"

enum class Shadow { None, ReadWrite, ReadOnly };

static const char *shadow_name(Shadow s) {
    return s == Shadow::None ? "none" : s == Shadow::ReadWrite ? "read-write" : "read-only";
}

static void measure(CUdevice dev, bool host, size_t mib, Shadow shadow, int rounds) {
    const size_t bytes = mib << 20;
    const int count = 8;
    CUmemAllocationProp prop = pinned_prop(host, host_numa_node(dev));
    std::vector<CUmemGenericAllocationHandle> handles(count);
    for (auto &h : handles) CU(cuMemCreate(&h, bytes, &prop, 0));
    CUdeviceptr blocks, shadows;
    CU(cuMemAddressReserve(&blocks, bytes * count, 2 << 20, 0, 0));
    CU(cuMemAddressReserve(&shadows, bytes * count, 2 << 20, 0, 0));
    const CUmemAccessDesc access = device_access(dev);
    CUmemAccessDesc read_only = access;
    read_only.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    if (shadow != Shadow::None) {
        for (int i = 0; i < count; i++) {
            CUdeviceptr at = shadows + i * bytes;
            CU(cuMemMap(at, bytes, 0, handles[i], 0));
            CU(cuMemSetAccess(at, bytes, shadow == Shadow::ReadWrite ? &access : &read_only, 1));
        }
    }
    std::vector<double> map_us, access_us, unmap_us;
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < count; i++) {
            CUdeviceptr at = blocks + i * bytes;
            double t0 = now_ms();
            CU(cuMemMap(at, bytes, 0, handles[i], 0));
            double t1 = now_ms();
            CU(cuMemSetAccess(at, bytes, &access, 1));
            double t2 = now_ms();
            map_us.push_back((t1 - t0) * 1e3);
            access_us.push_back((t2 - t1) * 1e3);
        }
        for (int i = 0; i < count; i++) {
            double t0 = now_ms();
            CU(cuMemUnmap(blocks + i * bytes, bytes));
            unmap_us.push_back((now_ms() - t0) * 1e3);
        }
    }
    if (shadow != Shadow::None)
        for (int i = 0; i < count; i++) CU(cuMemUnmap(shadows + i * bytes, bytes));
    CU(cuMemAddressFree(blocks, bytes * count));
    CU(cuMemAddressFree(shadows, bytes * count));
    for (auto h : handles) CU(cuMemRelease(h));
    printf("{\"memory\": \"%s\", \"mib\": %zu, \"shadow\": \"%s\", \"map_us\": %.1f, \"access_us\": %.1f, "
           "\"unmap_us\": %.1f}\n",
           host ? "host" : "device", mib, shadow_name(shadow), median(map_us), median(access_us),
           median(unmap_us));
    fflush(stdout);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 16;
    if (rounds < 1) rounds = 16;
    CUdevice dev = first_device();
    for (bool host : {true, false})
        for (size_t mib : {2, 16, 64})
            for (Shadow s : {Shadow::None, Shadow::ReadWrite, Shadow::ReadOnly})
                measure(dev, host, mib, s, rounds);
    // The first measures again: whether the machine's state moved meanwhile.
    measure(dev, true, 16, Shadow::None, rounds);
    measure(dev, true, 16, Shadow::ReadWrite, rounds);
    return 0;
}
