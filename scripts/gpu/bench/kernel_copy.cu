// Copies out of the device made by a kernel instead of a copy engine: what
// they carry, and whether setting access to a mapping waits for them as it
// waits for a copy engine's copy out (about 1 ms a mapping beside copies
// queued back to back, remap_beside.cu). A kernel writes host memory
// through its mapping at a device address (a HOST_NUMA handle, as the
// spill tier's), CTAS blocks of THREADS threads, 16 bytes a thread a turn.
//   [PTX=copy_out.ptx] kernel_copy [MIB_A_COPY [BLOCKS MIB]]
// Prints one JSON object per measure.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "copy_out.cuh"
#include "cu_check.h"

// Work that fills every SM for a while: the job's kernels, in short.
__global__ void busy(float *out, int turns) {
    float x = threadIdx.x;
    for (int i = 0; i < turns; i++) x = x * 0.999f + 0.5f;
    if (x == 1.2345f) out[0] = x;
}

struct Pair {
    CUdeviceptr device_side = 0, host_side = 0;
    size_t bytes = 0;
};

// `bytes` of device memory and of host memory (NUMA node nearest), the
// latter mapped for the device.
static Pair make_pair(CUdevice dev, size_t bytes) {
    Pair p;
    p.bytes = bytes;
    CU(cuMemAlloc(&p.device_side, bytes));
    p.host_side = mapped_host_memory(dev, bytes);
    return p;
}

enum class How { Engine, Kernel, None };

// Queues one copy of `bytes` out on `stream`.
static void queue(const Pair &p, size_t bytes, How how, int ctas, int threads, cudaStream_t stream) {
    if (how == How::None) return;
    if (how == How::Engine) {
        CU(cuMemcpyAsync(p.host_side, p.device_side, bytes, (CUstream)stream));
    } else {
        copy_out<<<ctas, threads, 0, stream>>>((uint4 *)p.host_side, (const uint4 *)p.device_side, bytes / 16);
    }
}

// GB/s of copies of `bytes`, `count` queued back to back.
static double rate(const Pair &p, size_t bytes, int count, How how, int ctas, int threads, cudaStream_t s) {
    queue(p, bytes, how, ctas, threads, s);
    cudaStreamSynchronize(s);
    double began = now_ms();
    for (int i = 0; i < count; i++) queue(p, bytes, how, ctas, threads, s);
    cudaStreamSynchronize(s);
    return double(count) * bytes / (now_ms() - began) / 1e6;
}

static double per_mapping(const Mappings &b) { return access_ms(b) / b.handles.size(); }

// Setting access beside copies queued `depth` at a time on a thread of
// their own, made as `how` says; and, with `busy_too`, beside kernels that
// fill the device on another stream, whose pace is also reported.
static void beside(const char *name, const Mappings &b, const Pair &p, CUcontext context, size_t copy_bytes, How how,
                   int ctas, int threads, int depth, bool busy_too, bool remap) {
    std::atomic<bool> stop{false}, started{false};
    size_t copies = 0;
    double copy_ms = 0;
    std::thread t([&] {
        CU(cuCtxSetCurrent(context));
        int least, greatest;
        CU(cuCtxGetStreamPriorityRange(&least, &greatest));
        cudaStream_t s;
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest);
        std::vector<cudaEvent_t> done(depth);
        for (auto &e : done) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        double began = now_ms();
        for (size_t i = 0; !stop.load(); i++) {
            int slot = i % depth;
            if (i >= size_t(depth)) {
                cudaEventSynchronize(done[slot]);
                copies++;
            }
            if (i == size_t(depth)) started = true;
            size_t half = p.bytes / depth;
            Pair piece = p;
            piece.device_side += slot * half;
            piece.host_side += slot * half;
            queue(piece, std::min(copy_bytes, half), how, ctas, threads, s);
            cudaEventRecord(done[slot], s);
        }
        copy_ms = now_ms() - began;
        cudaStreamSynchronize(s);
        for (auto &e : done) cudaEventDestroy(e);
        cudaStreamDestroy(s);
    });
    float *sink;
    cudaMalloc(&sink, 4);
    cudaStream_t busy_stream;
    cudaStreamCreateWithFlags(&busy_stream, cudaStreamNonBlocking);
    cudaEvent_t b0, b1;
    cudaEventCreate(&b0);
    cudaEventCreate(&b1);
    while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (busy_too) {
        cudaEventRecord(b0, busy_stream);
        for (int i = 0; i < 400; i++) busy<<<132 * 8, 256, 0, busy_stream>>>(sink, 200000);
        cudaEventRecord(b1, busy_stream);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    double ms = remap ? per_mapping(b) : 0;
    if (!remap) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    float busy_ms = 0;
    if (busy_too) {
        cudaEventSynchronize(b1);
        cudaEventElapsedTime(&busy_ms, b0, b1);
    }
    stop = true;
    t.join();
    printf("{\"beside\": \"%s\", \"per_mapping_ms\": %.3f, \"copies_gb_per_s\": %.1f, \"busy_ms\": %.1f}\n", name, ms,
           double(copies) * std::min(copy_bytes, p.bytes / depth) / copy_ms / 1e6, busy_ms);
    fflush(stdout);
    cudaFree(sink);
    cudaStreamDestroy(busy_stream);
}

// The PTX kernel at `path` (the spill tier's copy_out.ptx): whether the
// driver compiles it, whether it copies every byte, and its rate.
static void check_ptx(const char *path, const Pair &p, cudaStream_t s) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("{\"ptx\": \"%s\", \"error\": \"cannot read it\"}\n", path);
        return;
    }
    std::vector<char> text(1 << 16, 0);
    size_t got = fread(text.data(), 1, text.size() - 1, f);
    fclose(f);
    text[got] = 0;
    CUmodule module;
    CUresult rc = cuModuleLoadData(&module, text.data());
    if (rc != CUDA_SUCCESS) {
        printf("{\"ptx\": \"%s\", \"load_error\": %d}\n", path, int(rc));
        return;
    }
    CUfunction function;
    CU(cuModuleGetFunction(&function, module, "vramshare_copy_out"));
    size_t bytes = 64 << 20;
    std::vector<unsigned> pattern(bytes / 4), back(bytes / 4, 0);
    for (size_t i = 0; i < pattern.size(); i++) pattern[i] = unsigned(i * 2654435761u);
    CU(cuMemcpyHtoD(p.device_side, pattern.data(), bytes));
    CU(cuMemsetD8(p.host_side, 0, bytes));
    CUdeviceptr dst = p.host_side, src = p.device_side;
    unsigned long long count = bytes / 16;
    void *params[] = {&dst, &src, &count};
    CU(cuLaunchKernel(function, 32, 1, 1, 512, 1, 1, 0, (CUstream)s, params, nullptr));
    CU(cuStreamSynchronize((CUstream)s));
    CU(cuMemcpyDtoH(back.data(), p.host_side, bytes));
    bool same = memcmp(pattern.data(), back.data(), bytes) == 0;
    double began = now_ms();
    for (int i = 0; i < 32; i++) CU(cuLaunchKernel(function, 32, 1, 1, 512, 1, 1, 0, (CUstream)s, params, nullptr));
    CU(cuStreamSynchronize((CUstream)s));
    double rate = 32.0 * bytes / (now_ms() - began) / 1e6;
    printf("{\"ptx\": \"%s\", \"copied_right\": %s, \"gb_per_s\": %.1f}\n", path, same ? "true" : "false", rate);
    fflush(stdout);
}

int main(int argc, char **argv) {
    size_t copy_mib = argc > 1 ? atoi(argv[1]) : 16;
    size_t blocks = argc > 2 ? atoi(argv[2]) : 64;
    size_t mib = argc > 3 ? atoi(argv[3]) : 4;
    CUdevice dev = first_device();
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    cudaFree(0);
    Pair p = make_pair(dev, 512 << 20);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (const char *ptx = getenv("PTX")) check_ptx(ptx, p, s);
    // The rate alone, by how and by the kernel's shape.
    size_t bytes = copy_mib << 20;
    printf("{\"alone\": \"engine\", \"mib\": %zu, \"gb_per_s\": %.1f}\n", copy_mib,
           rate(p, bytes, 64, How::Engine, 0, 0, s));
    for (int ctas : {4, 8, 16, 32, 66, 132, 264})
        for (int threads : {256, 1024})
            printf("{\"alone\": \"kernel\", \"mib\": %zu, \"ctas\": %d, \"threads\": %d, \"gb_per_s\": %.1f}\n", copy_mib,
                   ctas, threads, rate(p, bytes, 64, How::Kernel, ctas, threads, s));
    fflush(stdout);
    // Mappings beside them.
    for (bool on_device : {false, true}) {
        CUmemAllocationProp prop = pinned_prop(!on_device, host_numa_node(dev));
        Mappings b = make_mappings(blocks, mib << 20, prop);
        printf("{\"mappings\": \"%s\", \"blocks\": %zu, \"mib\": %zu, \"idle_per_mapping_ms\": %.3f}\n",
               on_device ? "device" : "host", blocks, mib, per_mapping(b));
        beside("engine, 16 queued", b, p, context, bytes, How::Engine, 0, 0, 16, false, true);
        beside("engine, 1 at a time", b, p, context, bytes, How::Engine, 0, 0, 1, false, true);
        for (int ctas : {16, 32, 132}) {
            char name[96];
            snprintf(name, sizeof name, "kernel %d x 512, 16 queued", ctas);
            beside(name, b, p, context, bytes, How::Kernel, ctas, 512, 16, false, true);
        }
        // Whether a mapping waits for the kernel's copies in flight or for
        // those queued: one and two at a time, as the engine's were.
        for (int depth : {1, 2}) {
            char name[96];
            snprintf(name, sizeof name, "kernel 16 x 512, %d at a time", depth);
            beside(name, b, p, context, bytes, How::Kernel, 16, 512, depth, false, true);
        }
        printf("{\"mappings\": \"%s\", \"idle_again_per_mapping_ms\": %.3f}\n", on_device ? "device" : "host",
               per_mapping(b));
        free_mappings(b);
    }
    // Beside kernels that fill the device: what each gives the other.
    Mappings none;
    beside("busy kernels alone", none, p, context, bytes, How::None, 0, 0, 1, true, false);
    for (int ctas : {16, 32}) {
        char name[96];
        snprintf(name, sizeof name, "busy kernels beside kernel copies %d x 512", ctas);
        beside(name, none, p, context, bytes, How::Kernel, ctas, 512, 16, true, false);
    }
    beside("busy kernels beside engine copies, 16 queued", none, p, context, bytes, How::Engine, 0, 0, 16, true, false);
    return 0;
}
