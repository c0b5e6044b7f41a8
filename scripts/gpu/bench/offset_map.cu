// Whether the driver maps part of a larger physical allocation (a non-zero
// offset, a size below the handle's) for device memory, as it refuses for
// host memory; and, where it does, what carving a block from one large
// handle costs against a handle of the block's own.
//   cd scripts/gpu/bench && nvcc -O2 -std=c++17 -o /tmp/om offset_map.cu -lcuda
//   /tmp/om [MIB...]   (default 2 16 64)
// For device memory (then host memory on the device's NUMA node): one
// handle of 256 MiB (or 4 times the largest MIB); a block of MIB mapped at
// offset MIB into it, its access set, a kernel writing it, and the bytes
// read back through a mapping of the whole handle at offset MIB (they must
// be the kernel's). Prints one JSON object per size and memory: `mapped`
// (the driver took the offset mapping), `same_bytes`, and median of five
// (ms): `carved_in` (map at the offset + set access), `carved_out` (unmap),
// `whole_in` (create + map + set access a handle of MIB), `whole_out`
// (unmap + release). Where a mapping is refused, its error and no times.
// Everything it allocates is freed before it exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

extern "C" __global__ void stamp(unsigned *data, size_t n, unsigned value) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        data[i] = value + (unsigned)i;
}

int main(int argc, char **argv) {
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) sizes.push_back(strtoul(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {2, 16, 64};
    CUdevice dev = first_device();
    int numa = host_numa_node(dev);
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUmemAccessDesc access = device_access(dev);
    const size_t page = 2 << 20;
    size_t largest = *std::max_element(sizes.begin(), sizes.end()) << 20;
    size_t arena = std::max<size_t>(256 << 20, 4 * largest);

    for (bool device : {true, false}) {
        CUmemAllocationProp p = pinned_prop(!device, numa);
        CUmemGenericAllocationHandle big;
        CU(cuMemCreate(&big, arena, &p, 0));
        // The whole handle, mapped once, to read the carved blocks back.
        CUdeviceptr all = 0;
        CU(cuMemAddressReserve(&all, arena, page, 0, 0));
        CU(cuMemMap(all, arena, 0, big, 0));
        CU(cuMemSetAccess(all, arena, &access, 1));
        for (size_t mib : sizes) {
            size_t bytes = ((mib << 20) + page - 1) / page * page;
            // OFFSET=0: a prefix of the handle, smaller than it.
            const char *at = getenv("OFFSET");
            size_t offset = at && !strcmp(at, "0") ? 0 : bytes;
            CUdeviceptr va = 0;
            CU(cuMemAddressReserve(&va, bytes, page, 0, 0));
            CUresult rc = cuMemMap(va, bytes, offset, big, 0);
            const char *memory = device ? "device" : "host_numa";
            if (rc != CUDA_SUCCESS) {
                const char *text = nullptr;
                cuGetErrorString(rc, &text);
                printf("{\"what\": \"offset_map\", \"mib\": %zu, \"offset_mib\": %zu, \"memory\": \"%s\", \"mapped\": false, "
                       "\"error\": \"%s\"}\n",
                       bytes >> 20, offset >> 20, memory, text ? text : "?");
                CU(cuMemAddressFree(va, bytes));
                fflush(stdout);
                continue;
            }
            CU(cuMemSetAccess(va, bytes, &access, 1));
            size_t words = bytes / 4;
            unsigned value = 0x5eed0000u + (unsigned)mib;
            stamp<<<264, 256, 0, stream>>>((unsigned *)va, words, value);
            CU(cuStreamSynchronize(stream));
            std::vector<unsigned> back(words);
            CU(cuMemcpyDtoH(back.data(), all + offset, bytes));
            bool same = true;
            for (size_t i = 0; i < words && same; i++) same = back[i] == value + (unsigned)i;
            CU(cuMemUnmap(va, bytes));

            std::vector<double> carved_in, carved_out, whole_in, whole_out;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now_ms();
                CU(cuMemMap(va, bytes, offset, big, 0));
                CU(cuMemSetAccess(va, bytes, &access, 1));
                double t1 = now_ms();
                CU(cuMemUnmap(va, bytes));
                double t2 = now_ms();
                double t3 = now_ms();
                CUmemGenericAllocationHandle h = make_and_map(va, bytes, p, access);
                double t4 = now_ms();
                unmap_and_release(va, bytes, h);
                double t5 = now_ms();
                carved_in.push_back(t1 - t0);
                carved_out.push_back(t2 - t1);
                whole_in.push_back(t4 - t3);
                whole_out.push_back(t5 - t4);
            }
            CU(cuMemAddressFree(va, bytes));
            printf("{\"what\": \"offset_map\", \"mib\": %zu, \"offset_mib\": %zu, \"memory\": \"%s\", \"mapped\": true, "
                   "\"same_bytes\": %s, \"carved_in_ms\": %.4f, \"carved_out_ms\": %.4f, "
                   "\"whole_in_ms\": %.4f, \"whole_out_ms\": %.4f}\n",
                   bytes >> 20, offset >> 20, memory, same ? "true" : "false", median(carved_in),
                   median(carved_out), median(whole_in), median(whole_out));
            fflush(stdout);
        }
        CU(cuMemUnmap(all, arena));
        CU(cuMemAddressFree(all, arena));
        CU(cuMemRelease(big));
    }
    CU(cuStreamDestroy(stream));
    return 0;
}
