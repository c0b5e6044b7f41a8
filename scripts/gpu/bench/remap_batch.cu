// What mapping host-located memory for the device costs, and what it is
// paid for: BLOCKS blocks of MIB each, side by side in one reserved range,
// each with its own host memory handle (as the spill tier's blocks have),
// mapped block by block (cuMemMap, timed apart from cuMemSetAccess) with
// access set block by block or once over them all, then unmapped; with the
// copy engines idle, then while a thread keeps them carrying copies of
// COPY_MIB each (into the device, out of it, or both ways at once).
// Blocks of device memory instead with `device` (what a move in maps);
// the copies made in a context of their own (not the one that maps) with
// COPY_CONTEXT=own in the environment. COPY_HOW says how the copies out of
// the device are made: `engine` (cuMemcpyDtoHAsync into pinned memory, the
// default), `vmm` (cuMemcpyAsync into host-located memory mapped for the
// device, as the spill tier's moves out are), `kernel` (a kernel on
// COPY_BLOCKS blocks, default 16, writing pinned memory in place).
// With BUSY=1, a kernel on every SM runs again and again beside it all,
// as a job's compute would: its time a launch (on the clock, on the
// device, and inside the launch call and its events' records) is printed
// alone, beside remaps alone, beside copies alone, and beside each measure.
//   remap_batch [BLOCKS [MIB [COPY_MIB [host|device]]]]
// Prints one JSON object per measure (milliseconds for all the blocks,
// median of 3). Everything it allocates is freed before it exits.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <cuda.h>

#include "cu_check.h"

struct Blocks {
    CUdeviceptr base = 0;
    size_t bytes = 0;  // each block's
    std::vector<CUmemGenericAllocationHandle> handles;
};

struct Times {
    double map = 0, access = 0, unmap = 0;
};

// Maps every block, its access set block by block (`batch` false) or once
// over the whole range, then unmaps them one by one; each part's time.
static Times remap(const Blocks &b, const CUmemAccessDesc &access, bool batch) {
    Times t;
    for (size_t i = 0; i < b.handles.size(); i++) {
        CUdeviceptr at = b.base + i * b.bytes;
        double began = now_ms();
        CU(cuMemMap(at, b.bytes, 0, b.handles[i], 0));
        double mapped = now_ms();
        t.map += mapped - began;
        if (!batch) {
            CU(cuMemSetAccess(at, b.bytes, &access, 1));
            t.access += now_ms() - mapped;
        }
    }
    if (batch) {
        double began = now_ms();
        CU(cuMemSetAccess(b.base, b.bytes * b.handles.size(), &access, 1));
        t.access = now_ms() - began;
    }
    double began = now_ms();
    for (size_t i = 0; i < b.handles.size(); i++) CU(cuMemUnmap(b.base + i * b.bytes, b.bytes));
    t.unmap = now_ms() - began;
    return t;
}

static void measure(const Blocks &b, const CUmemAccessDesc &access, bool batch, const char *beside,
                    size_t copy_mib) {
    std::vector<double> map, set, unmap;
    for (int round = 0; round < 3; round++) {
        Times t = remap(b, access, batch);
        map.push_back(t.map);
        set.push_back(t.access);
        unmap.push_back(t.unmap);
    }
    printf("{\"how\": \"%s\", \"blocks\": %zu, \"mib\": %zu, \"beside\": \"%s\", \"copy_mib\": %zu, "
           "\"map_ms\": %.3f, \"access_ms\": %.3f, \"unmap_ms\": %.3f}\n",
           batch ? "batch" : "each", b.handles.size(), b.bytes >> 20, beside, copy_mib, median(map),
           median(set), median(unmap));
    fflush(stdout);
}

// A copy out of the device made by a kernel (COPY_HOW=kernel): each thread
// copies 16 bytes at a time, striding over the grid.
__global__ void copy_out(const int4 *from, int4 *to, size_t count) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += gridDim.x * size_t(blockDim.x))
        to[i] = from[i];
}

enum class How { engine, vmm, kernel };

static How copy_how() {
    const char *how = getenv("COPY_HOW");
    if (!how || strcmp(how, "engine") == 0) return How::engine;
    if (strcmp(how, "vmm") == 0) return How::vmm;
    if (strcmp(how, "kernel") == 0) return How::kernel;
    fprintf(stderr, "COPY_HOW=%s: expected engine, vmm or kernel\n", how);
    exit(2);
}

// A thread that keeps copies going (each made as COPY_HOW says) of `bytes` each way
// asked for, sixteen queued on each stream at all times (a copy is queued
// as the one sixteen before it ends), until stopped; device and pinned host
// memory of 16 * `bytes` each, freed when it stops. `finish()` stops it and says
// what each way carried while it ran, in GB/s.
struct CopyLoop {
    static const int depth = 16;
    std::atomic<bool> stop{false};
    std::atomic<size_t> copies{0};
    std::atomic<double> queue_ms{0};  // inside the calls that queue copies
    double began = 0, ended = 0;
    size_t bytes;
    std::thread thread;
    CopyLoop(CUcontext context, size_t bytes, bool in, bool out, How how, int numa) : bytes(bytes) {
        thread = std::thread([=] {
            CU(cuCtxSetCurrent(context));
            CUdevice dev;
            CU(cuCtxGetDevice(&dev));
            // Host-located memory mapped for the device, for `vmm`.
            CUmemGenericAllocationHandle host_handle = 0;
            CUdeviceptr host_range = 0;
            if (how == How::vmm) {
                CUmemAllocationProp p = {};
                p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
                p.location.id = numa;
                CU(cuMemCreate(&host_handle, bytes * depth, &p, 0));
                CU(cuMemAddressReserve(&host_range, bytes * depth, 2 << 20, 0, 0));
                CU(cuMemMap(host_range, bytes * depth, 0, host_handle, 0));
                CUmemAccessDesc access = device_access(dev);
                CU(cuMemSetAccess(host_range, bytes * depth, &access, 1));
            }
            int blocks = getenv("COPY_BLOCKS") ? atoi(getenv("COPY_BLOCKS")) : 16;
            CUdeviceptr device_side;
            void *pinned;
            CUstream s_in, s_out;
            CUevent done_in[depth], done_out[depth];
            CU(cuMemAlloc(&device_side, bytes * depth));
            CU(cuMemHostAlloc(&pinned, bytes * depth, 0));
            CU(cuStreamCreate(&s_in, CU_STREAM_NON_BLOCKING));
            // The copies out at the highest priority, as a mover's would be:
            // a kernel's blocks then start before the job's waiting ones.
            int least, greatest;
            CU(cuCtxGetStreamPriorityRange(&least, &greatest));
            CU(cuStreamCreateWithPriority(&s_out, CU_STREAM_NON_BLOCKING, greatest));
            for (int k = 0; k < depth; k++) {
                CU(cuEventCreate(&done_in[k], CU_EVENT_DISABLE_TIMING));
                CU(cuEventCreate(&done_out[k], CU_EVENT_DISABLE_TIMING));
            }
            began = now_ms();
            for (size_t i = 0; !stop.load(); i++) {
                int slot = i % depth;
                if (i >= depth) {
                    if (in) CU(cuEventSynchronize(done_in[slot]));
                    if (out) CU(cuEventSynchronize(done_out[slot]));
                    copies++;
                }
                CUdeviceptr d = device_side + slot * bytes;
                char *h = static_cast<char *>(pinned) + slot * bytes;
                double queuing = now_ms();
                if (in) {
                    CU(cuMemcpyHtoDAsync(d, h, bytes, s_in));
                    CU(cuEventRecord(done_in[slot], s_in));
                }
                if (out) {
                    if (how == How::engine) {
                        CU(cuMemcpyDtoHAsync(h, d, bytes, s_out));
                    } else if (how == How::vmm) {
                        CU(cuMemcpyAsync(host_range + slot * bytes, d, bytes, s_out));
                    } else {
                        copy_out<<<blocks, 512, 0, s_out>>>(reinterpret_cast<const int4 *>(d),
                                                            reinterpret_cast<int4 *>(h), bytes / sizeof(int4));
                        if (cudaGetLastError() != cudaSuccess) {
                            fprintf(stderr, "copy_out did not launch\n");
                            exit(1);
                        }
                    }
                    CU(cuEventRecord(done_out[slot], s_out));
                }
                queue_ms = queue_ms + (now_ms() - queuing);
            }
            ended = now_ms();
            CU(cuStreamSynchronize(s_in));
            CU(cuStreamSynchronize(s_out));
            for (int k = 0; k < depth; k++) {
                CU(cuEventDestroy(done_in[k]));
                CU(cuEventDestroy(done_out[k]));
            }
            CU(cuStreamDestroy(s_in));
            CU(cuStreamDestroy(s_out));
            CU(cuMemFreeHost(pinned));
            CU(cuMemFree(device_side));
            if (host_range) {
                CU(cuMemUnmap(host_range, bytes * depth));
                CU(cuMemAddressFree(host_range, bytes * depth));
                CU(cuMemRelease(host_handle));
            }
        });
    }
    double finish() {
        stop = true;
        thread.join();
        printf("{\"copy_thread_ms_queuing\": %.1f, \"of_ms\": %.1f}\n", queue_ms.load(), ended - began);
        return double(copies.load()) * bytes / (ended - began) / 1e6;
    }
    ~CopyLoop() {
        if (thread.joinable()) finish();
    }
};

__global__ void spin(float *out, int rounds) {
    float a = threadIdx.x;
    for (int i = 0; i < rounds; i++) a = a * 0.999999f + 0.5f;
    if (a == -1.0f) out[0] = a;  // never: keeps the loop
}

// A thread that launches `spin` on eight blocks of 256 threads an SM (as
// many threads as an SM holds, about 1 ms a launch), one launch after
// another, each waited for, until stopped.
struct ComputeLoop {
    std::atomic<bool> stop{false};
    std::atomic<size_t> launches{0};
    std::atomic<double> since{0};
    std::atomic<size_t> gpu_us{0};
    std::atomic<size_t> launch_us{0};  // inside the launch
    std::atomic<size_t> record_us{0};  // inside its events' records
    std::thread thread;
    ComputeLoop(CUcontext context, CUdevice dev) {
        int sms = 0;
        CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
        since = now_ms();
        thread = std::thread([=] {
            CU(cuCtxSetCurrent(context));
            CUstream stream;
            CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
            CUevent start, end;
            CU(cuEventCreate(&start, 0));
            CU(cuEventCreate(&end, 0));
            while (!stop.load()) {
                double recording = now_ms();
                CU(cuEventRecord(start, stream));
                double launching = now_ms();
                spin<<<sms * 8, 256, 0, stream>>>(nullptr, 100000);
                double launched = now_ms();
                CU(cuEventRecord(end, stream));
                launch_us += size_t((launched - launching) * 1000);
                record_us += size_t((launching - recording + now_ms() - launched) * 1000);
                CU(cuStreamSynchronize(stream));
                float took = 0;
                CU(cuEventElapsedTime(&took, start, end));
                gpu_us += size_t(took * 1000);
                launches++;
            }
            CU(cuEventDestroy(start));
            CU(cuEventDestroy(end));
            CU(cuStreamDestroy(stream));
        });
    }
    // The mean time a launch took since the last call, on the clock (launch
    // and wait included) and on the device (between events around it).
    double ms() {
        double now = now_ms();
        size_t n = launches.exchange(0);
        gpu = double(gpu_us.exchange(0)) / 1000 / (n ? n : 1);
        launching = double(launch_us.exchange(0)) / 1000 / (n ? n : 1);
        recording = double(record_us.exchange(0)) / 1000 / (n ? n : 1);
        return (now - since.exchange(now)) / (n ? n : 1);
    }
    double gpu = 0, launching = 0, recording = 0;
    ~ComputeLoop() {
        stop = true;
        thread.join();
    }
};

static void print_compute(ComputeLoop &busy, const char *beside) {
    double wall = busy.ms();
    printf("{\"compute_ms_a_launch\": %.3f, \"on_device_ms\": %.3f, \"launching_ms\": %.3f, "
           "\"recording_ms\": %.3f, \"beside\": \"%s\"}\n",
           wall, busy.gpu, busy.launching, busy.recording, beside);
}

int main(int argc, char **argv) {
    size_t blocks = argc > 1 ? atoi(argv[1]) : 16;
    size_t bytes = size_t(argc > 2 ? atoi(argv[2]) : 16) << 20;
    size_t copy_mib = argc > 3 ? atoi(argv[3]) : 256;
    bool on_device = argc > 4 && strcmp(argv[4], "device") == 0;
    CUdevice dev = first_device();
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    CUcontext copy_context = context;
    const char *own = getenv("COPY_CONTEXT");
    if (own && strcmp(own, "own") == 0) {
#if CUDA_VERSION >= 13000
        CU(cuCtxCreate(&copy_context, nullptr, 0, dev));
#else
        CU(cuCtxCreate(&copy_context, 0, dev));
#endif
        CU(cuCtxSetCurrent(context));
    }
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = on_device ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = on_device ? dev : host_numa_node(dev);
    Blocks b;
    b.bytes = bytes;
    b.handles.resize(blocks);
    for (auto &handle : b.handles) CU(cuMemCreate(&handle, bytes, &p, 0));
    CU(cuMemAddressReserve(&b.base, bytes * blocks, 2 << 20, 0, 0));
    CUmemAccessDesc access = device_access(dev);
    How how = copy_how();
    for (bool batch : {false, true}) measure(b, access, batch, "idle", 0);
    struct Beside {
        const char *name;
        bool in, out;
    };
    std::unique_ptr<ComputeLoop> busy;
    if (getenv("BUSY")) {
        busy.reset(new ComputeLoop(context, dev));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        busy->ms();
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        print_compute(*busy, "nothing");
        // Remaps alone, one round after another for about 300 ms.
        double began = now_ms();
        int rounds = 0;
        for (; now_ms() - began < 300; rounds++) remap(b, access, false);
        print_compute(*busy, "remaps only");
        printf("{\"remap_rounds\": %d}\n", rounds);
        // Copies alone, each way asked for, for 300 ms.
        for (Beside beside : {Beside{"in", true, false}, Beside{"out", false, true}}) {
            CopyLoop copies(copy_context, copy_mib << 20, beside.in, beside.out, how, p.location.id);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            busy->ms();
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            print_compute(*busy, beside.in ? "copies in only" : "copies out only");
        }
    }
    for (Beside beside : {Beside{"in", true, false}, Beside{"out", false, true}, Beside{"both", true, true}}) {
        CopyLoop copies(copy_context, copy_mib << 20, beside.in, beside.out, how, p.location.id);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (busy) busy->ms();
        measure(b, access, false, beside.name, copy_mib);
        if (busy) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (busy) print_compute(*busy, beside.name);
        printf("{\"beside\": \"%s\", \"copy_mib\": %zu, \"gb_per_s_each_way\": %.1f}\n", beside.name,
               copy_mib, copies.finish());
    }
    CU(cuMemAddressFree(b.base, bytes * blocks));
    for (auto handle : b.handles) CU(cuMemRelease(handle));
    if (copy_context != context) CU(cuCtxDestroy(copy_context));
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
