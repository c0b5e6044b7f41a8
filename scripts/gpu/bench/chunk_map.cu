// What a block costs to back with chunks of one shared pool, against one
// handle of its own: for blocks of MIB (device memory, then host memory on
// NUMA node 0), the calls a block coming in or going out makes either way.
//   whole:  cuMemCreate + cuMemMap + cuMemSetAccess, then cuMemUnmap +
//           cuMemRelease (a handle of the block's size, made and released);
//   chunks: a cuMemMap of each 2 MiB chunk (taken from handles made before,
//           as a pool would keep them) + one cuMemSetAccess over the whole
//           range, then one cuMemUnmap over the whole range (the chunks
//           stay, for the next block of any size).
// A kernel touches each mapping before it goes, so the driver has used it.
//   cd scripts/gpu/bench && nvcc -O2 -std=c++17 -o /tmp/cm chunk_map.cu -lcuda
//   /tmp/cm [MIB...]   (default 2 16 64 256)
// Prints one JSON object per size and memory (median of 5, milliseconds);
// exit status 1, naming the call, where the driver refuses a step (the
// answer to whether one cuMemSetAccess or cuMemUnmap may span several
// mappings is that step's). Everything it allocates is freed before it
// exits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

extern "C" __global__ void touch(float *data, size_t n) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        data[i] += 1.0f;
}

static void use(CUdeviceptr va, size_t bytes, CUstream stream) {
    touch<<<264, 256, 0, stream>>>((float *)va, bytes / 4);
    CU(cuStreamSynchronize(stream));
}

int main(int argc, char **argv) {
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) sizes.push_back(strtoul(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {2, 16, 64, 256};
    CUdevice dev = first_device();
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUmemAccessDesc access = device_access(dev);
    const size_t chunk = 2 << 20;

    for (size_t mib : sizes) {
        size_t bytes = ((mib << 20) + chunk - 1) / chunk * chunk;
        size_t count = bytes / chunk;
        for (bool device : {true, false}) {
            CUmemAllocationProp p = pinned_prop(!device, 0);
            std::vector<CUmemGenericAllocationHandle> pool(count);
            for (auto &h : pool) CU(cuMemCreate(&h, chunk, &p, 0));
            std::vector<double> whole_in, whole_out, chunks_in, chunks_out;
            for (int rep = 0; rep < 5; rep++) {
                CUdeviceptr va = 0;
                CU(cuMemAddressReserve(&va, bytes, chunk, 0, 0));

                double t0 = now_ms();
                CUmemGenericAllocationHandle h = make_and_map(va, bytes, p, access);
                double t1 = now_ms();
                use(va, bytes, stream);
                double t2 = now_ms();
                unmap_and_release(va, bytes, h);
                double t3 = now_ms();

                double t4 = now_ms();
                for (size_t i = 0; i < count; i++)
                    CU(cuMemMap(va + i * chunk, chunk, 0, pool[i], 0));
                CU(cuMemSetAccess(va, bytes, &access, 1));
                double t5 = now_ms();
                use(va, bytes, stream);
                double t6 = now_ms();
                CU(cuMemUnmap(va, bytes));
                double t7 = now_ms();

                CU(cuMemAddressFree(va, bytes));
                whole_in.push_back(t1 - t0);
                whole_out.push_back(t3 - t2);
                chunks_in.push_back(t5 - t4);
                chunks_out.push_back(t7 - t6);
            }
            for (auto h : pool) CU(cuMemRelease(h));
            printf("{\"what\": \"chunks\", \"mib\": %zu, \"memory\": \"%s\", \"chunks\": %zu, "
                   "\"whole_in_ms\": %.4f, \"whole_out_ms\": %.4f, "
                   "\"chunks_in_ms\": %.4f, \"chunks_out_ms\": %.4f}\n",
                   bytes >> 20, device ? "device" : "host_numa", count, median(whole_in),
                   median(whole_out), median(chunks_in), median(chunks_out));
            fflush(stdout);
        }
    }
    CU(cuStreamDestroy(stream));
    return 0;
}
