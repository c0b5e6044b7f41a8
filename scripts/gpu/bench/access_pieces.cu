// Whether the access to one mapping may be set a piece at a time, and what
// that costs against one call over the whole mapping: a thread that sets a
// large mapping of host memory in pieces holds the driver for short calls,
// so that another thread's calls wait less behind it. And whether host
// memory made as CU_MEM_LOCATION_TYPE_HOST rather than HOST_NUMA costs less
// a byte to map. Also whether the driver unmaps part of a mapping.
//   cd scripts/gpu/bench && nvcc -O2 -std=c++17 -arch=native -o /tmp/ap access_pieces.cu -lcuda && /tmp/ap [MIB...]
// For host memory on the device's NUMA node (the tier's kind), host memory
// made with no node, and device memory, each MIB (default 16 64): a handle
// mapped at a range of its own; access set over the whole mapping, then
// (mapped anew) in pieces of 8, 4 and 2 MiB; a kernel then writes every word
// through the mapping, and the bytes are copied back through a second
// mapping of the handle (`same_bytes`). Prints one JSON object per memory,
// size and way: median of five (us) for all the calls together, and the
// longest single call; a memory the driver will not make is named with its
// error.
#include <cstdio>
#include <cstring>
#include <vector>

#include "cu_check.h"

extern "C" __global__ void stamp(unsigned *data, size_t n, unsigned value) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        data[i] = value + (unsigned)i;
}

static const char *error_text(CUresult rc) {
    const char *text = nullptr;
    cuGetErrorString(rc, &text);
    return text ? text : "?";
}

int main(int argc, char **argv) {
    std::vector<size_t> sizes;
    for (int i = 1; i < argc; i++) sizes.push_back(strtoul(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {16, 64};
    CUdevice dev = first_device();
    const CUmemAccessDesc access = device_access(dev);
    struct Kind {
        const char *name;
        CUmemLocationType type;
        int id;
    };
    const Kind kinds[] = {{"host_numa", CU_MEM_LOCATION_TYPE_HOST_NUMA, host_numa_node(dev)},
                          {"host", CU_MEM_LOCATION_TYPE_HOST, 0},
                          {"device", CU_MEM_LOCATION_TYPE_DEVICE, (int)dev}};
    for (const Kind &kind : kinds)
        for (size_t mib : sizes) {
            CUmemAllocationProp prop = {};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = kind.type;
            prop.location.id = kind.id;
            size_t bytes = mib << 20;
            CUmemGenericAllocationHandle h;
            CUresult made = cuMemCreate(&h, bytes, &prop, 0);
            if (made != CUDA_SUCCESS) {
                printf("{\"memory\": \"%s\", \"mib\": %zu, \"not_made\": \"%s\"}\n", kind.name, mib, error_text(made));
                continue;
            }
            CUdeviceptr at, check;
            CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
            CU(cuMemAddressReserve(&check, bytes, 2 << 20, 0, 0));
            CU(cuMemMap(check, bytes, 0, h, 0));
            CU(cuMemSetAccess(check, bytes, &access, 1));
            std::vector<unsigned> copied(bytes / 4);
            std::vector<size_t> pieces = {mib};
            for (size_t p : {(size_t)8, (size_t)4, (size_t)2})
                if (p < mib) pieces.push_back(p);
            for (size_t piece_mib : pieces) {
                size_t piece = piece_mib << 20;
                std::vector<double> totals, longest;
                bool accepted = true, same = true;
                for (int round = 0; round < 5 && accepted; round++) {
                    CU(cuMemMap(at, bytes, 0, h, 0));
                    double begun = now_ms(), worst = 0;
                    for (size_t off = 0; off < bytes; off += piece) {
                        double t = now_ms();
                        CUresult rc = cuMemSetAccess(at + off, piece, &access, 1);
                        worst = std::max(worst, now_ms() - t);
                        if (rc != CUDA_SUCCESS) {
                            printf("{\"memory\": \"%s\", \"mib\": %zu, \"piece_mib\": %zu, \"refused\": \"%s\"}\n",
                                   kind.name, mib, piece_mib, error_text(rc));
                            accepted = false;
                            break;
                        }
                    }
                    totals.push_back((now_ms() - begun) * 1000.0);
                    longest.push_back(worst * 1000.0);
                    if (accepted) {
                        unsigned value = 1000u * (unsigned)round + (unsigned)piece_mib;
                        stamp<<<256, 256>>>((unsigned *)at, bytes / 4, value);
                        CU(cuCtxSynchronize());
                        CU(cuMemcpyDtoH(copied.data(), check, bytes));
                        for (size_t i = 0; i < bytes / 4; i += 4099)
                            if (copied[i] != value + (unsigned)i) same = false;
                    }
                    CU(cuMemUnmap(at, bytes));
                }
                if (accepted)
                    printf("{\"memory\": \"%s\", \"mib\": %zu, \"piece_mib\": %zu, \"total_us\": %.1f, "
                           "\"longest_call_us\": %.1f, \"same_bytes\": %s}\n",
                           kind.name, mib, piece_mib, median(totals), median(longest), same ? "true" : "false");
                fflush(stdout);
            }
            // Part of a mapping unmapped: whether the driver takes it.
            CU(cuMemMap(at, bytes, 0, h, 0));
            CUresult rc = cuMemUnmap(at, 2 << 20);
            printf("{\"memory\": \"%s\", \"mib\": %zu, \"unmap_first_2_mib\": \"%s\"}\n", kind.name, mib,
                   rc == CUDA_SUCCESS ? "taken" : error_text(rc));
            if (rc == CUDA_SUCCESS)
                cuMemUnmap(at + (2 << 20), bytes - (2 << 20));
            else
                CU(cuMemUnmap(at, bytes));
            CU(cuMemUnmap(check, bytes));
            CU(cuMemAddressFree(check, bytes));
            CU(cuMemAddressFree(at, bytes));
            CU(cuMemRelease(h));
        }
    return 0;
}
