// What one block's mappings cost by its size, for host memory (the tier's
// kind, on the device's NUMA node) and device memory, each handle made
// beforehand: whether a move of one large block costs the driver less than
// moves of the same bytes in several smaller blocks, and by how much.
//   cd scripts/gpu/bench && nvcc -O2 -std=c++17 -arch=native -o /tmp/mbs map_by_size.cu -lcuda && /tmp/mbs [MIB...]
// For each MIB (default 2 4 8 16 32 64 128 256) and memory: a handle of MIB
// mapped at a range of its own and its access set (`in_us`), a kernel
// touching every page, then unmapped (`out_us`); for device memory also the
// handle made (`create_us`) and released (`release_us`). Median of seven
// rounds, microseconds; `per_mib` is in + out (+ create + release) over MIB.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cu_check.h"

extern "C" __global__ void touch(char *data, size_t bytes) {
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4096; i < bytes;
         i += (size_t)gridDim.x * blockDim.x * 4096)
        data[i] += 1;
}

int main(int argc, char **argv) {
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) sizes.push_back(strtoul(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {2, 4, 8, 16, 32, 64, 128, 256};
    CUdevice dev = first_device();
    const CUmemAccessDesc access = device_access(dev);
    for (bool host : {true, false})
        for (size_t mib : sizes) {
            size_t bytes = mib << 20;
            CUmemAllocationProp prop = pinned_prop(host, host ? host_numa_node(dev) : 0);
            CUdeviceptr at;
            CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
            std::vector<double> in, out, create, release;
            CUmemGenericAllocationHandle h;
            CU(cuMemCreate(&h, bytes, &prop, 0));
            for (int round = 0; round < 7; round++) {
                double t = now_ms();
                CU(cuMemMap(at, bytes, 0, h, 0));
                CU(cuMemSetAccess(at, bytes, &access, 1));
                in.push_back((now_ms() - t) * 1000.0);
                touch<<<64, 256>>>((char *)at, bytes);
                CU(cuCtxSynchronize());
                t = now_ms();
                CU(cuMemUnmap(at, bytes));
                out.push_back((now_ms() - t) * 1000.0);
                if (!host) {
                    t = now_ms();
                    CU(cuMemRelease(h));
                    release.push_back((now_ms() - t) * 1000.0);
                    t = now_ms();
                    CU(cuMemCreate(&h, bytes, &prop, 0));
                    create.push_back((now_ms() - t) * 1000.0);
                }
            }
            CU(cuMemRelease(h));
            CU(cuMemAddressFree(at, bytes));
            double total = median(in) + median(out);
            if (host) {
                printf("{\"memory\": \"host\", \"mib\": %zu, \"in_us\": %.1f, \"out_us\": %.1f, \"per_mib\": %.2f}\n",
                       mib, median(in), median(out), total / mib);
            } else {
                total += median(create) + median(release);
                printf("{\"memory\": \"device\", \"mib\": %zu, \"in_us\": %.1f, \"out_us\": %.1f, \"create_us\": %.1f, "
                       "\"release_us\": %.1f, \"per_mib\": %.2f}\n",
                       mib, median(in), median(out), median(create), median(release), total / mib);
            }
            fflush(stdout);
        }
    return 0;
}
