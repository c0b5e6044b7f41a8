// What each virtual memory call the spill tier makes costs beside its copies
// out, call by call, by how those copies are made. The job's allocations
// make device memory (create, map, set access) and give it back (unmap,
// release); a move out remaps a block from device to host memory, a move in
// from host to device memory. Each such call waits beside a copy engine's
// copy out of the device (remap_beside.cu): here the same sequences beside
// copies out by the engine and by a kernel, in pieces of several sizes, one
// or two at a time, and beside copies into the device, which leave them
// alone.
//   nvcc -O2 -std=c++17 -arch=native -o /tmp/vb vm_beside.cu -lcuda && /tmp/vb [ROUNDS]
// Prints one JSON object per way of copying: the median microseconds of each
// call over ROUNDS (32) rounds, and what the copies carried meanwhile.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "copy_out.cuh"
#include "cu_check.h"

enum class How { None, Engine, Kernel };

struct Way {
    const char *name;
    How how;
    size_t piece_mib;
    int depth;
    bool into_device = false;  // copies in instead of out
    bool to_pinned = false;    // out into cuMemHostAlloc memory, not a host handle
    bool remaps_beside = false;  // another thread remaps host memory all the while, as the mover does
};

// Maps a 16 MiB handle of host memory at a range of its own, sets access and
// unmaps it again, over and over until `stop`, as the mover thread remaps
// blocks sent out: whether the calls of one thread wait for another's.
static void remap_until(CUdevice dev, CUcontext context, std::atomic<bool> &stop, size_t &remaps) {
    CU(cuCtxSetCurrent(context));
    size_t bytes = 16 << 20;
    CUmemAllocationProp on_host = pinned_prop(true, host_numa_node(dev));
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, bytes, &on_host, 0));
    CUdeviceptr at;
    CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
    const CUmemAccessDesc access = device_access(dev);
    while (!stop.load()) {
        CU(cuMemMap(at, bytes, 0, h, 0));
        CU(cuMemSetAccess(at, bytes, &access, 1));
        CU(cuMemUnmap(at, bytes));
        remaps++;
    }
    CU(cuMemAddressFree(at, bytes));
    CU(cuMemRelease(h));
}

// The copies' memory: device memory and host memory of `bytes` each, the
// host memory both a handle of the tier's kind mapped for the device and
// memory from cuMemHostAlloc.
struct Sides {
    size_t bytes = 256 << 20;
    CUdeviceptr device_side = 0, host_side = 0;
    void *pinned = nullptr;
};

static Sides make_sides(CUdevice dev) {
    Sides s;
    CU(cuMemAlloc(&s.device_side, s.bytes));
    s.host_side = mapped_host_memory(dev, s.bytes);
    CU(cuMemHostAlloc(&s.pinned, s.bytes, 0));
    return s;
}

// Queues one piece of `bytes` at `offset`, as `way` says.
static void queue_piece(const Way &way, const Sides &s, size_t offset, size_t bytes, cudaStream_t stream) {
    CUdeviceptr device = s.device_side + offset;
    CUdeviceptr host = way.to_pinned ? CUdeviceptr(static_cast<char *>(s.pinned) + offset) : s.host_side + offset;
    if (way.how == How::Kernel) {
        copy_out<<<16, 512, 0, stream>>>((uint4 *)host, (const uint4 *)device, bytes / 16);
    } else if (way.into_device) {
        CU(cuMemcpyAsync(device, host, bytes, (CUstream)stream));
    } else {
        CU(cuMemcpyAsync(host, device, bytes, (CUstream)stream));
    }
}

// Copies as `way` says on a thread of their own until `stop`: GB/s carried.
static void copy_until(const Way &way, const Sides &s, CUcontext context, std::atomic<bool> &stop,
                       std::atomic<bool> &started, double &gb_per_s) {
    CU(cuCtxSetCurrent(context));
    if (way.how == How::None) {
        started = true;
        return;
    }
    int least, greatest;
    CU(cuCtxGetStreamPriorityRange(&least, &greatest));
    cudaStream_t stream;
    cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest);
    size_t piece = way.piece_mib << 20;
    std::vector<cudaEvent_t> done(way.depth);
    for (auto &e : done) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    size_t landed = 0, slots = s.bytes / piece;
    double began = now_ms();
    for (size_t i = 0; !stop.load(); i++) {
        int slot = i % way.depth;
        if (i >= size_t(way.depth)) {
            cudaEventSynchronize(done[slot]);
            landed++;
        }
        if (i == size_t(way.depth)) started = true;
        queue_piece(way, s, (i % slots) * piece, piece, stream);
        cudaEventRecord(done[slot], stream);
    }
    double spent = now_ms() - began;
    cudaStreamSynchronize(stream);
    gb_per_s = double(landed) * piece / spent / 1e6;
    for (auto &e : done) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
}

// Microseconds of one call.
template <typename F>
static double us(F call) {
    double began = now_ms();
    call();
    return (now_ms() - began) * 1e3;
}

struct Calls {
    // The job's allocation: device memory made, mapped, its access set; then
    // given back.
    std::vector<double> create, map, access, unmap, release;
    // A move out: the device memory unmapped, host memory mapped and set;
    // a move in: the host memory unmapped, device memory mapped and set.
    std::vector<double> out_unmap, out_map, out_access, in_unmap, in_map, in_access;
};

static void one_round(Calls &c, CUdevice dev, CUdeviceptr range, size_t alloc_bytes, size_t block_bytes,
                      CUmemGenericAllocationHandle block_device, CUmemGenericAllocationHandle block_host) {
    const CUmemAccessDesc access = device_access(dev);
    CUmemAllocationProp on_device = pinned_prop(false, 0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr at = range, block = range + alloc_bytes;
    c.create.push_back(us([&] { CU(cuMemCreate(&h, alloc_bytes, &on_device, 0)); }));
    c.map.push_back(us([&] { CU(cuMemMap(at, alloc_bytes, 0, h, 0)); }));
    c.access.push_back(us([&] { CU(cuMemSetAccess(at, alloc_bytes, &access, 1)); }));
    c.unmap.push_back(us([&] { CU(cuMemUnmap(at, alloc_bytes)); }));
    c.release.push_back(us([&] { CU(cuMemRelease(h)); }));
    // The block starts on the device (mapped before the round).
    c.out_unmap.push_back(us([&] { CU(cuMemUnmap(block, block_bytes)); }));
    c.out_map.push_back(us([&] { CU(cuMemMap(block, block_bytes, 0, block_host, 0)); }));
    c.out_access.push_back(us([&] { CU(cuMemSetAccess(block, block_bytes, &access, 1)); }));
    c.in_unmap.push_back(us([&] { CU(cuMemUnmap(block, block_bytes)); }));
    c.in_map.push_back(us([&] { CU(cuMemMap(block, block_bytes, 0, block_device, 0)); }));
    c.in_access.push_back(us([&] { CU(cuMemSetAccess(block, block_bytes, &access, 1)); }));
}

static std::string field(const char *name, const std::vector<double> &v) {
    char text[64];
    snprintf(text, sizeof text, "\"%s_us\": %.1f", name, median(v));
    return text;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 32;
    CUdevice dev = first_device();
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    cudaFree(0);
    Sides sides = make_sides(dev);
    // An allocation of 8 MiB and a block of 16 MiB moved, the sizes the
    // GPT-2 step makes and moves most often (cu_check.h's mix).
    size_t alloc_bytes = 8 << 20, block_bytes = 16 << 20;
    CUdeviceptr range;
    CU(cuMemAddressReserve(&range, alloc_bytes + block_bytes, 2 << 20, 0, 0));
    CUmemGenericAllocationHandle block_device, block_host;
    CUmemAllocationProp on_device = pinned_prop(false, 0), on_host = pinned_prop(true, host_numa_node(dev));
    CU(cuMemCreate(&block_device, block_bytes, &on_device, 0));
    CU(cuMemCreate(&block_host, block_bytes, &on_host, 0));
    const Way ways[] = {
        {"idle", How::None, 0, 1},
        {"engine out, 4 MiB one at a time", How::Engine, 4, 1},
        {"engine out, 2 MiB one at a time", How::Engine, 2, 1},
        {"engine out, 1 MiB one at a time", How::Engine, 1, 1},
        {"engine out, 4 MiB two at a time", How::Engine, 4, 2},
        {"engine out into cuMemHostAlloc, 4 MiB one at a time", How::Engine, 4, 1, false, true},
        {"engine in, 4 MiB two at a time", How::Engine, 4, 2, true},
        {"kernel out, 4 MiB one at a time", How::Kernel, 4, 1},
        {"kernel out, 4 MiB two at a time", How::Kernel, 4, 2},
        {"kernel out, 16 MiB one at a time", How::Kernel, 16, 1},
        {"host remaps on another thread", How::None, 0, 1, false, false, true},
        {"host remaps on another thread, engine out 4 MiB one at a time", How::Engine, 4, 1, false, false, true},
        {"idle again", How::None, 0, 1},
    };
    for (const Way &way : ways) {
        std::atomic<bool> stop{false}, started{false};
        double gb_per_s = 0;
        std::thread copier([&] { copy_until(way, sides, context, stop, started, gb_per_s); });
        size_t remaps = 0;
        std::thread remapper;
        if (way.remaps_beside) remapper = std::thread([&] { remap_until(dev, context, stop, remaps); });
        while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        map_for_device(range + alloc_bytes, block_bytes, block_device);
        Calls c;
        for (int i = 0; i < rounds; i++) {
            one_round(c, dev, range, alloc_bytes, block_bytes, block_device, block_host);
            // Some time between rounds, as between the job's calls.
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        CU(cuMemUnmap(range + alloc_bytes, block_bytes));
        stop = true;
        copier.join();
        if (remapper.joinable()) remapper.join();
        std::string line = std::string("{\"beside\": \"") + way.name + "\"";
        const std::vector<std::pair<const char *, const std::vector<double> *>> fields = {
            {"create", &c.create},       {"map", &c.map},           {"access", &c.access},
            {"unmap", &c.unmap},         {"release", &c.release},   {"out_unmap", &c.out_unmap},
            {"out_map", &c.out_map},     {"out_access", &c.out_access}, {"in_unmap", &c.in_unmap},
            {"in_map", &c.in_map},       {"in_access", &c.in_access}};
        for (const auto &[name, v] : fields) line += ", " + field(name, *v);
        char rate[64];
        snprintf(rate, sizeof rate, ", \"copies_gb_per_s\": %.1f, \"remaps_beside\": %zu}", gb_per_s, remaps);
        printf("%s%s\n", line.c_str(), rate);
        fflush(stdout);
    }
    return 0;
}
