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
//   split       as batches, but a block under SPLIT_MIB (16 MiB) is remapped
//               only once the batch's last copy has landed: beside running
//               copies mapping host memory costs about 1 ms more a mapping
//               (access_span.cu), more than a small block's copy
//   after       as batches, every remap once the batch's last copy has landed
//   out_rate [--busy] [--crowd=N] [--chatter] [TOTAL_MIB [MIB...]]
//                                               (default 4096, sizes 4 16 64)
// A size of "mix" stands for blocks of the sizes a GPT-2 step moves out, in
// about their proportions by count, one after another in a mixed order.
// With --busy, a stream of 1 GiB memsets (kernels on the SMs) keeps the
// device computing throughout each timed round, as a job's kernels would.
// With --crowd=N, N other blocks of 2 MiB live beside them, each in a range
// of its own with device memory at its start and host memory at its second
// half, as a job's tier holds a thousand blocks and more. With --chatter,
// a second thread makes stream-ordered allocations of 4 MiB, a memset of
// each and its free, without pause, as the job's thread does between its
// launches while the tier's mover thread remaps.
// Prints one JSON object per size and schedule (GB/s over the blocks'
// bytes, median of 3). Everything it allocates is freed before it exits.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

static const int IN_FLIGHT = 32;
static const size_t SPLIT_MIB = 16;

struct Block {
    size_t bytes;
    CUdeviceptr at;
    CUmemGenericAllocationHandle device, host;
    CUevent copied;
};

// The block's range back on fresh device memory (untimed, between rounds).
static void bring_back(Block &b, const CUmemAllocationProp &device) {
    CU(cuMemUnmap(b.at, b.bytes));
    CU(cuMemCreate(&b.device, b.bytes, &device, 0));
    map_for_device(b.at, b.bytes, b.device);
}

// The block's range (twice its size), device memory mapped at its start
// and host memory at its second half.
static void make(Block &b, const CUmemAllocationProp &device, const CUmemAllocationProp &host) {
    CU(cuMemAddressReserve(&b.at, 2 * b.bytes, 2 << 20, 0, 0));
    CU(cuMemCreate(&b.device, b.bytes, &device, 0));
    CU(cuMemCreate(&b.host, b.bytes, &host, 0));
    map_for_device(b.at, b.bytes, b.device);
    map_for_device(b.at + b.bytes, b.bytes, b.host);
}

// Undoes `make`, with the device memory mapped at the start again.
static void unmake(Block &b) {
    CU(cuMemUnmap(b.at, b.bytes));
    CU(cuMemUnmap(b.at + b.bytes, b.bytes));
    CU(cuMemRelease(b.device));
    CU(cuMemRelease(b.host));
    CU(cuMemAddressFree(b.at, 2 * b.bytes));
}

static void queue_copy(Block &b, CUstream stream) {
    CU(cuMemcpyAsync(b.at + b.bytes, b.at, b.bytes, stream));
    CU(cuEventRecord(b.copied, stream));
}

static void remap_out(Block &b) {
    CU(cuMemUnmap(b.at, b.bytes));
    map_for_device(b.at, b.bytes, b.host);
    CU(cuMemRelease(b.device));
    b.device = 0;
}

static void finish(Block &b) {
    CU(cuEventSynchronize(b.copied));
    remap_out(b);
}

// Batches of IN_FLIGHT copies; of each batch, the blocks `now` picks are
// remapped as their own copies land, the others once the batch's last
// copy has.
template <typename Now>
static void in_batches(std::vector<Block> &blocks, CUstream stream, Now now) {
    for (size_t first = 0; first < blocks.size(); first += IN_FLIGHT) {
        size_t last = std::min(blocks.size(), first + IN_FLIGHT);
        for (size_t i = first; i < last; i++) queue_copy(blocks[i], stream);
        for (size_t i = first; i < last; i++)
            if (now(blocks[i])) finish(blocks[i]);
        CU(cuEventSynchronize(blocks[last - 1].copied));
        for (size_t i = first; i < last; i++)
            if (!now(blocks[i])) remap_out(blocks[i]);
    }
}

// Keeps the device computing for about a second: memsets of `busy` (1 GiB)
// queued on `stream`.
static void keep_busy(CUdeviceptr busy, CUstream stream) {
    for (int i = 0; i < 2000; i++) CU(cuMemsetD32Async(busy, i, (1u << 30) / 4, stream));
}

// Until `stop`: stream-ordered allocations, a memset and a free on
// `stream`, in `context`, as a job's thread makes them.
static void chatter(CUcontext context, CUstream stream, std::atomic<bool> *stop) {
    CU(cuCtxSetCurrent(context));
    while (!stop->load()) {
        CUdeviceptr p = 0;
        CU(cuMemAllocAsync(&p, 4u << 20, stream));
        CU(cuMemsetD8Async(p, 1, 4u << 20, stream));
        CU(cuMemFreeAsync(p, stream));
    }
    CU(cuStreamSynchronize(stream));
}

int main(int argc, char **argv) {
    bool busy = false, chattering = false;
    size_t crowd = 0;
    int first_arg = 1;
    for (; first_arg < argc && std::string(argv[first_arg]).rfind("--", 0) == 0; first_arg++) {
        std::string flag = argv[first_arg];
        if (flag == "--busy") busy = true;
        else if (flag == "--chatter") chattering = true;
        else if (flag.rfind("--crowd=", 0) == 0) crowd = strtoull(flag.c_str() + 8, nullptr, 10);
        else {
            fprintf(stderr, "out_rate: unknown flag %s (--busy, --crowd=N, --chatter)\n", flag.c_str());
            return 2;
        }
    }
    size_t total_mib = argc > first_arg ? strtoull(argv[first_arg], nullptr, 10) : 4096;
    std::vector<std::string> sizes;
    for (int i = first_arg + 1; i < argc; i++) sizes.push_back(argv[i]);
    if (sizes.empty()) sizes = {"4", "16", "64"};
    CUdevice dev = first_device();
    int numa = host_numa_node(dev);
    CUstream stream, computing;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&computing, CU_STREAM_NON_BLOCKING));
    CUdeviceptr scratch = 0;
    if (busy) CU(cuMemAlloc(&scratch, 1u << 30));
    const CUmemAllocationProp device = pinned_prop(false, 0), host = pinned_prop(true, numa);
    // The crowd: 2 MiB blocks, device memory at each start, host memory at
    // each second half, never moved.
    std::vector<Block> others(crowd);
    for (Block &b : others) {
        b.bytes = 2u << 20;
        make(b, device, host);
    }
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    CUstream chatting;
    CU(cuStreamCreate(&chatting, CU_STREAM_NON_BLOCKING));
    const char *names[] = {"copies", "one", "batches", "pipelined", "remaps", "split", "after"};
    const int SCHEDULES = 7;
    for (const std::string &size : sizes) {
        std::vector<size_t> pattern;
        if (size == "mix") pattern.assign(std::begin(GPT2_MOVE_MIX), std::end(GPT2_MOVE_MIX));
        else pattern.push_back(strtoull(size.c_str(), nullptr, 10));
        std::vector<Block> blocks;
        for (size_t total = 0; total + pattern[blocks.size() % pattern.size()] <= total_mib;) {
            size_t mib = pattern[blocks.size() % pattern.size()];
            total += mib;
            Block b = {};
            b.bytes = mib << 20;
            blocks.push_back(b);
        }
        size_t all = 0;
        for (Block &b : blocks) {
            all += b.bytes;
            make(b, device, host);
            CU(cuMemsetD8(b.at, 7, b.bytes));
            CU(cuEventCreate(&b.copied, CU_EVENT_DISABLE_TIMING));
        }
        CU(cuCtxSynchronize());
        for (int schedule = 0; schedule < SCHEDULES; schedule++) {
            std::vector<double> rounds;
            for (int round = 0; round < 3; round++) {
                if (busy) keep_busy(scratch, computing);
                std::atomic<bool> stop(false);
                std::thread chatterer;
                if (chattering) chatterer = std::thread(chatter, context, chatting, &stop);
                double began = now_ms();
                if (schedule == 0) {
                    for (Block &b : blocks) queue_copy(b, stream);
                    CU(cuStreamSynchronize(stream));
                } else if (schedule == 1) {
                    for (Block &b : blocks) {
                        queue_copy(b, stream);
                        finish(b);
                    }
                } else if (schedule == 2) {
                    in_batches(blocks, stream, [](const Block &) { return true; });
                } else if (schedule == 3) {
                    pipelined(blocks, IN_FLIGHT, [&](Block &b) { queue_copy(b, stream); }, finish);
                } else if (schedule == 4) {
                    for (Block &b : blocks) remap_out(b);
                } else if (schedule == 5) {
                    in_batches(blocks, stream, [](const Block &b) { return b.bytes > (SPLIT_MIB << 20); });
                } else {
                    in_batches(blocks, stream, [](const Block &) { return false; });
                }
                rounds.push_back(now_ms() - began);
                stop.store(true);
                if (chatterer.joinable()) chatterer.join();
                if (busy) CU(cuStreamSynchronize(computing));
                // Untimed: every block back on the device for the next round.
                if (schedule != 0)
                    for (Block &b : blocks) bring_back(b, device);
                CU(cuCtxSynchronize());
            }
            std::sort(rounds.begin(), rounds.end());
            double ms = rounds[1];
            printf("{\"block_mib\": \"%s\", \"blocks\": %zu, \"busy\": %s, \"crowd\": %zu, \"chatter\": %s, \"schedule\": \"%s\", \"ms\": %.1f, \"GB_per_s\": %.1f}\n",
                   size.c_str(), blocks.size(), busy ? "true" : "false", crowd, chattering ? "true" : "false", names[schedule], ms, all / ms / 1e6);
            fflush(stdout);
        }
        for (Block &b : blocks) {
            unmake(b);
            CU(cuEventDestroy(b.copied));
        }
    }
    for (Block &b : others) unmake(b);
    CU(cuStreamDestroy(chatting));
    if (busy) CU(cuMemFree(scratch));
    CU(cuStreamDestroy(computing));
    CU(cuStreamDestroy(stream));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
