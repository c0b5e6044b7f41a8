// How fast blocks move out to host memory when neighbouring blocks go out
// together as a run: the run's blocks lie one after another in one range
// (twice the run's size), each with device memory of its own mapped at its
// place, and one host allocation for the whole run mapped at the second
// half. A run moves out as: each block copied to its place in the second
// half on a copy engine; once the last copy has landed, each block's device
// memory unmapped, the host allocation mapped over the whole run with one
// cuMemMap and one cuMemSetAccess, the device memory released. Mapping host
// memory costs about 1 ms a mapping more while copies out of the device run
// (access_span.cu), so a run of R blocks pays that once where R blocks
// moved one by one pay it R times.
//   run_out [--arena] [TOTAL_MIB [RUN...]]  (default 4096, runs of 1 4 8 16)
// With --arena, every run's host memory is a range of one host allocation
// (cuMemMap at an offset into it) instead of an allocation of its own: host
// memory pinned once, in large pieces, and handed to blocks by range.
// Blocks have the sizes a GPT-2 step moves out (GPT2_MOVE_MIX), in that
// order. For each run length, the rate (GB/s over the blocks' bytes, median
// of 3 rounds) of:
//   copies      the copies alone: what the link gives
//   pipelined   runs queued while earlier ones are remapped, at most about
//               32 blocks' copies under way
//   remaps      the remaps alone, with the copy engines idle
// First it prints the granularity the driver gives for host and device
// memory (minimum and recommended). Everything it allocates is freed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

static const size_t IN_FLIGHT_BLOCKS = 32;

struct Run {
    CUdeviceptr at = 0;
    size_t bytes = 0;
    std::vector<size_t> sizes;  // each block's, in order
    std::vector<CUmemGenericAllocationHandle> device;
    CUmemGenericAllocationHandle host = 0;
    size_t host_offset = 0;  // into `host`, where it is the arena
    bool own_host = true;
    CUevent copied = nullptr;
};

// Each block's device memory mapped at its place in the run.
static void map_blocks(Run &r, const CUmemAllocationProp &device) {
    size_t offset = 0;
    for (size_t i = 0; i < r.sizes.size(); i++) {
        CU(cuMemCreate(&r.device[i], r.sizes[i], &device, 0));
        map_for_device(r.at + offset, r.sizes[i], r.device[i]);
        offset += r.sizes[i];
    }
}

// The run's range, its blocks' device memory, and its host memory: its own
// allocation, or `arena` from `offset` on where `arena` is not 0.
static void make(Run &r, const CUmemAllocationProp &device, const CUmemAllocationProp &host,
                 CUmemGenericAllocationHandle arena, size_t offset) {
    for (size_t s : r.sizes) r.bytes += s;
    r.device.assign(r.sizes.size(), 0);
    CU(cuMemAddressReserve(&r.at, 2 * r.bytes, 2 << 20, 0, 0));
    if (arena) {
        r.host = arena;
        r.host_offset = offset;
        r.own_host = false;
    } else {
        CU(cuMemCreate(&r.host, r.bytes, &host, 0));
    }
    map_for_device(r.at + r.bytes, r.bytes, r.host, r.host_offset);
    map_blocks(r, device);
    CU(cuMemsetD8(r.at, 7, r.bytes));
    CU(cuEventCreate(&r.copied, CU_EVENT_DISABLE_TIMING));
}

static void queue_copies(Run &r, CUstream stream) {
    size_t offset = 0;
    for (size_t s : r.sizes) {
        CU(cuMemcpyAsync(r.at + r.bytes + offset, r.at + offset, s, stream));
        offset += s;
    }
    CU(cuEventRecord(r.copied, stream));
}

static void remap_out(Run &r) {
    size_t offset = 0;
    for (size_t s : r.sizes) {
        CU(cuMemUnmap(r.at + offset, s));
        offset += s;
    }
    map_for_device(r.at, r.bytes, r.host, r.host_offset);
    for (CUmemGenericAllocationHandle &h : r.device) {
        CU(cuMemRelease(h));
        h = 0;
    }
}

static void finish(Run &r) {
    CU(cuEventSynchronize(r.copied));
    remap_out(r);
}

// The run back on fresh device memory (untimed, between rounds).
static void bring_back(Run &r, const CUmemAllocationProp &device) {
    CU(cuMemUnmap(r.at, r.bytes));
    map_blocks(r, device);
}

static void unmake(Run &r) {
    size_t offset = 0;
    for (size_t i = 0; i < r.sizes.size(); i++) {
        CU(cuMemUnmap(r.at + offset, r.sizes[i]));
        CU(cuMemRelease(r.device[i]));
        offset += r.sizes[i];
    }
    CU(cuMemUnmap(r.at + r.bytes, r.bytes));
    if (r.own_host) CU(cuMemRelease(r.host));
    CU(cuMemAddressFree(r.at, 2 * r.bytes));
    CU(cuEventDestroy(r.copied));
}

static void granularity(const char *name, const CUmemAllocationProp &p) {
    size_t least = 0, best = 0;
    CU(cuMemGetAllocationGranularity(&least, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CU(cuMemGetAllocationGranularity(&best, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("{\"memory\": \"%s\", \"granularity_minimum\": %zu, \"granularity_recommended\": %zu}\n", name, least, best);
}

int main(int argc, char **argv) {
    int first_arg = 1;
    bool arena = argc > 1 && std::string(argv[1]) == "--arena";
    if (arena) first_arg++;
    size_t total_mib = argc > first_arg ? strtoull(argv[first_arg], nullptr, 10) : 4096;
    std::vector<size_t> lengths;
    for (int i = first_arg + 1; i < argc; i++) lengths.push_back(strtoull(argv[i], nullptr, 10));
    if (lengths.empty()) lengths = {1, 4, 8, 16};
    CUdevice dev = first_device();
    const CUmemAllocationProp device = pinned_prop(false, 0), host = pinned_prop(true, host_numa_node(dev));
    granularity("host", host);
    granularity("device", device);
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const char *names[] = {"copies", "pipelined", "remaps"};
    for (size_t length : lengths) {
        if (length == 0) continue;
        std::vector<Run> runs;
        size_t total = 0, blocks = 0;
        for (size_t n = 0; total + GPT2_MOVE_MIX[n % (sizeof GPT2_MOVE_MIX / sizeof *GPT2_MOVE_MIX)] <= total_mib; n++) {
            size_t mib = GPT2_MOVE_MIX[n % (sizeof GPT2_MOVE_MIX / sizeof *GPT2_MOVE_MIX)];
            if (runs.empty() || runs.back().sizes.size() == length) runs.emplace_back();
            runs.back().sizes.push_back(mib << 20);
            total += mib;
            blocks++;
        }
        CUmemGenericAllocationHandle pinned = 0;
        if (arena) CU(cuMemCreate(&pinned, total << 20, &host, 0));
        size_t offset = 0;
        for (Run &r : runs) {
            make(r, device, host, pinned, offset);
            offset += r.bytes;
        }
        CU(cuCtxSynchronize());
        size_t window = std::max<size_t>(2, IN_FLIGHT_BLOCKS / length);
        for (int schedule = 0; schedule < 3; schedule++) {
            std::vector<double> rounds;
            for (int round = 0; round < 3; round++) {
                double began = now_ms();
                if (schedule == 0) {
                    for (Run &r : runs) queue_copies(r, stream);
                    CU(cuStreamSynchronize(stream));
                } else if (schedule == 1) {
                    pipelined(runs, window, [&](Run &r) { queue_copies(r, stream); }, finish);
                } else {
                    for (Run &r : runs) remap_out(r);
                }
                rounds.push_back(now_ms() - began);
                if (schedule != 0)
                    for (Run &r : runs) bring_back(r, device);
                CU(cuCtxSynchronize());
            }
            std::sort(rounds.begin(), rounds.end());
            double ms = rounds[1];
            printf("{\"run_blocks\": %zu, \"blocks\": %zu, \"runs\": %zu, \"arena\": %s, \"schedule\": \"%s\", \"ms\": %.1f, \"GB_per_s\": %.1f}\n",
                   length, blocks, runs.size(), arena ? "true" : "false", names[schedule], ms, (total << 20) / ms / 1e6);
            fflush(stdout);
        }
        for (Run &r : runs) unmake(r);
        if (pinned) CU(cuMemRelease(pinned));
    }
    CU(cuStreamDestroy(stream));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
