// How fast blocks can move out to host memory as the spill tier moves them:
// each block is virtual memory at a range twice its size, device memory
// mapped at the block and host memory at the second half; a move out copies
// the block to the second half on a copy engine, then maps the host memory
// at the block (cuMemUnmap, cuMemMap, cuMemSetAccess) and releases the
// device memory. For TOTAL_MIB of blocks of each size in MIB..., the rate of:
//   copies      the copies alone (no remap): what the link gives
//   one         each move whole before the next: copy, wait, remap
//   batches     32 copies queued, then each remapped as its copy lands,
//               then the next 32 (the mover thread's schedule)
//   pipelined   up to 32 copies queued, the oldest remapped as its copy
//               lands and a new copy queued in its place
//   remaps      the remaps alone, with the copy engines idle
//   out_rate [--busy] [TOTAL_MIB [MIB...]]      (default 4096, sizes 4 16 64)
// With --busy, a stream of 1 GiB memsets (kernels on the SMs) keeps the
// device computing throughout each timed round, as a job's kernels would.
// Prints one JSON object per size and schedule (GB/s over the blocks'
// bytes, median of 3). Everything it allocates is freed before it exits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

static const int IN_FLIGHT = 32;

static double now_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static CUmemAllocationProp prop(bool host, int numa) {
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = host ? numa : 0;
    return p;
}

struct Block {
    CUdeviceptr at;
    CUmemGenericAllocationHandle device, host;
    CUevent copied;
};

static CUmemAccessDesc access_desc() {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

static void map(CUdeviceptr at, size_t bytes, CUmemGenericAllocationHandle handle) {
    CUmemAccessDesc access = access_desc();
    CU(cuMemMap(at, bytes, 0, handle, 0));
    CU(cuMemSetAccess(at, bytes, &access, 1));
}

// The block's range back on fresh device memory (untimed, between rounds).
static void bring_back(Block &b, size_t bytes, const CUmemAllocationProp &device) {
    CU(cuMemUnmap(b.at, bytes));
    CU(cuMemCreate(&b.device, bytes, &device, 0));
    map(b.at, bytes, b.device);
}

static void queue_copy(Block &b, size_t bytes, CUstream stream) {
    CU(cuMemcpyAsync(b.at + bytes, b.at, bytes, stream));
    CU(cuEventRecord(b.copied, stream));
}

static void remap_out(Block &b, size_t bytes) {
    CU(cuMemUnmap(b.at, bytes));
    map(b.at, bytes, b.host);
    CU(cuMemRelease(b.device));
    b.device = 0;
}

static void finish(Block &b, size_t bytes) {
    CU(cuEventSynchronize(b.copied));
    remap_out(b, bytes);
}

// Keeps the device computing for about a second: memsets of `busy` (1 GiB)
// queued on `stream`.
static void keep_busy(CUdeviceptr busy, CUstream stream) {
    for (int i = 0; i < 2000; i++) CU(cuMemsetD32Async(busy, i, (1u << 30) / 4, stream));
}

int main(int argc, char **argv) {
    bool busy = argc > 1 && std::string(argv[1]) == "--busy";
    int first_arg = busy ? 2 : 1;
    size_t total_mib = argc > first_arg ? strtoull(argv[first_arg], nullptr, 10) : 4096;
    std::vector<size_t> sizes;
    for (int i = first_arg + 1; i < argc; i++) sizes.push_back(strtoull(argv[i], nullptr, 10));
    if (sizes.empty()) sizes = {4, 16, 64};
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext context;
    CU(cuDevicePrimaryCtxRetain(&context, dev));
    CU(cuCtxSetCurrent(context));
    int numa = 0;
    if (cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS || numa < 0)
        numa = 0;
    CUstream stream, computing;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&computing, CU_STREAM_NON_BLOCKING));
    CUdeviceptr scratch = 0;
    if (busy) CU(cuMemAlloc(&scratch, 1u << 30));
    const CUmemAllocationProp device = prop(false, 0), host = prop(true, numa);
    const char *names[] = {"copies", "one", "batches", "pipelined", "remaps"};
    for (size_t mib : sizes) {
        size_t bytes = mib << 20, count = total_mib / mib;
        std::vector<Block> blocks(count);
        for (Block &b : blocks) {
            CU(cuMemAddressReserve(&b.at, 2 * bytes, 2 << 20, 0, 0));
            CU(cuMemCreate(&b.device, bytes, &device, 0));
            CU(cuMemCreate(&b.host, bytes, &host, 0));
            map(b.at, bytes, b.device);
            map(b.at + bytes, bytes, b.host);
            CU(cuMemsetD8(b.at, 7, bytes));
            CU(cuEventCreate(&b.copied, CU_EVENT_DISABLE_TIMING));
        }
        CU(cuCtxSynchronize());
        for (int schedule = 0; schedule < 5; schedule++) {
            std::vector<double> rounds;
            for (int round = 0; round < 3; round++) {
                if (busy) keep_busy(scratch, computing);
                double began = now_ms();
                if (schedule == 0) {
                    for (Block &b : blocks) queue_copy(b, bytes, stream);
                    CU(cuStreamSynchronize(stream));
                } else if (schedule == 1) {
                    for (Block &b : blocks) {
                        queue_copy(b, bytes, stream);
                        finish(b, bytes);
                    }
                } else if (schedule == 2) {
                    for (size_t first = 0; first < count; first += IN_FLIGHT) {
                        size_t last = std::min(count, first + IN_FLIGHT);
                        for (size_t i = first; i < last; i++) queue_copy(blocks[i], bytes, stream);
                        for (size_t i = first; i < last; i++) finish(blocks[i], bytes);
                    }
                } else if (schedule == 3) {
                    std::deque<Block *> under_way;
                    for (Block &b : blocks) {
                        if (under_way.size() == IN_FLIGHT) {
                            finish(*under_way.front(), bytes);
                            under_way.pop_front();
                        }
                        queue_copy(b, bytes, stream);
                        under_way.push_back(&b);
                    }
                    for (Block *b : under_way) finish(*b, bytes);
                } else {
                    for (Block &b : blocks) remap_out(b, bytes);
                }
                rounds.push_back(now_ms() - began);
                if (busy) CU(cuStreamSynchronize(computing));
                // Untimed: every block back on the device for the next round.
                if (schedule != 0)
                    for (Block &b : blocks) bring_back(b, bytes, device);
                CU(cuCtxSynchronize());
            }
            std::sort(rounds.begin(), rounds.end());
            double ms = rounds[1];
            printf("{\"block_mib\": %zu, \"blocks\": %zu, \"busy\": %s, \"schedule\": \"%s\", \"ms\": %.1f, \"GB_per_s\": %.1f}\n",
                   mib, count, busy ? "true" : "false", names[schedule], ms, count * bytes / ms / 1e6);
            fflush(stdout);
        }
        for (Block &b : blocks) {
            CU(cuMemUnmap(b.at, bytes));
            CU(cuMemUnmap(b.at + bytes, bytes));
            CU(cuMemRelease(b.device));
            CU(cuMemRelease(b.host));
            CU(cuMemAddressFree(b.at, 2 * bytes));
            CU(cuEventDestroy(b.copied));
        }
    }
    if (busy) CU(cuMemFree(scratch));
    CU(cuStreamDestroy(computing));
    CU(cuStreamDestroy(stream));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
