// Host time per hooked call on a real GPU, for comparing builds of the shim
// with each other and with no shim, call by call, without a framework's
// noise around them:
//   hook_rate launch WORDS COLD_KIB   an empty kernel launched with <<<>>>
//       (CUDA 13's host stub, __cudaLaunchKernel, as PyTorch's kernels
//       are), taking three pointers and a struct of WORDS 8-byte words (16
//       or 160: PyTorch's index and reduction kernels pass hundreds of
//       bytes of sizes and strides) holding two more pointers; the
//       pointers fall in 16 MiB allocations (each a block of the spill
//       tier where moves are on);
//   hook_rate pair BYTES COLD_KIB     cudaMallocAsync + cudaFreeAsync of
//       BYTES on a stream of the program's own, as PyTorch's
//       backend:cudaMallocAsync allocates each tensor;
//   hook_rate query NAME COLD_KIB     one of the CUDA calls the shim's
//       hooks make of their own, alone (run bare: what the call costs the
//       hook): get-device (cudaGetDevice), ctx-get-device (cuCtxGetDevice),
//       mem-pool (cudaDeviceGetMemPool), cu-mem-pool (cuDeviceGetMemPool),
//       default-pool (cudaDeviceGetDefaultMemPool), pool-reserve
//       (cudaMemPoolGetAttribute, the reserve), event-record
//       (cudaEventRecord on a stream of the program's own), event-query
//       (cudaEventQuery of an event recorded and reached).
// With COLD_KIB above 0, each call is preceded by a walk over that many
// KiB of the program's own memory, as a framework's work between calls
// evicts the caches. Each call is timed alone (two clock reads around it,
// the same bare and under the shim), so the walk is in no time. Batches
// of 1000 calls with a synchronize between them, so that the launch queue
// never fills. Prints the median and best batch in ns per call (a pair's
// two calls together).
#include <algorithm>
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

template <int N> struct Words { long w[N]; };

template <int N>
__global__ void empty(float *a, float *b, float *c, Words<N> s) {
    if (s.w[0] == 1234 && threadIdx.x == 1234) a[0] = b[0] + c[0];
}

static volatile unsigned char *cold;
static size_t cold_bytes;

static void walk() {
    for (size_t line = 0; line < cold_bytes; line += 64) cold[line]++;
}

using Clock = std::chrono::steady_clock;
static double ns_since(Clock::time_point start) {
    return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

static const int kBatch = 1000, kBatches = 40;

template <int N> static int launches(std::vector<double> &ns) {
    const int blocks = 8;
    std::vector<float *> live(blocks);
    for (auto &p : live)
        if (cudaMalloc(&p, 16 << 20) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    Words<N> s;
    for (int w = 0; w < N; w++) s.w[w] = (long)(w % 7) * 64 + 1;
    for (int b = 0; b < kBatches + 2; b++) {
        cudaDeviceSynchronize();
        double spent = 0;
        for (int i = 0; i < kBatch; i++) {
            s.w[N / 2 - 2] = (long)live[(i + 3) % blocks];
            s.w[N - 2] = (long)live[(i + 4) % blocks];
            walk();
            auto start = Clock::now();
            empty<N><<<1, 32>>>(live[i % blocks] + 64, live[(i + 1) % blocks], live[(i + 2) % blocks] + 1024, s);
            spent += ns_since(start);
        }
        if (b >= 2) ns.push_back(spent / kBatch);
    }
    cudaDeviceSynchronize();
    return cudaGetLastError() != cudaSuccess;
}

static int pairs(size_t bytes, std::vector<double> &ns) {
    cudaStream_t stream;
    if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
    // As PyTorch's backend:cudaMallocAsync sets it: the pool keeps its
    // memory at each synchronize, so that no batch starts by mapping anew.
    cudaMemPool_t pool;
    cuuint64_t keep = ~0ull;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
        return 1;
    for (int b = 0; b < kBatches + 2; b++) {
        cudaStreamSynchronize(stream);
        double spent = 0;
        for (int i = 0; i < kBatch; i++) {
            void *p;
            walk();
            auto start = Clock::now();
            cudaError_t rc = cudaMallocAsync(&p, bytes, stream);
            spent += ns_since(start);
            if (rc != cudaSuccess) { fprintf(stderr, "cudaMallocAsync failed\n"); return 1; }
            walk();
            start = Clock::now();
            rc = cudaFreeAsync(p, stream);
            spent += ns_since(start);
            if (rc != cudaSuccess) { fprintf(stderr, "cudaFreeAsync failed\n"); return 1; }
        }
        if (b >= 2) ns.push_back(spent / kBatch);
    }
    cudaStreamSynchronize(stream);
    return 0;
}

// What a query is given: a stream of the program's own, an event recorded
// there and reached, and the device's default pool.
struct Handles {
    cudaStream_t stream;
    cudaEvent_t event;
    cudaMemPool_t pool;
};
using Query = bool (*)(const Handles &);

static bool get_device(const Handles &) { int device; return cudaGetDevice(&device) == cudaSuccess; }
static bool ctx_get_device(const Handles &) { CUdevice device; return cuCtxGetDevice(&device) == CUDA_SUCCESS; }
static bool mem_pool(const Handles &) { cudaMemPool_t pool; return cudaDeviceGetMemPool(&pool, 0) == cudaSuccess; }
static bool cu_mem_pool(const Handles &) { CUmemoryPool pool; return cuDeviceGetMemPool(&pool, 0) == CUDA_SUCCESS; }
static bool default_pool(const Handles &) { cudaMemPool_t pool; return cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess; }
static bool pool_reserve(const Handles &h) {
    cuuint64_t value;
    return cudaMemPoolGetAttribute(h.pool, cudaMemPoolAttrReservedMemCurrent, &value) == cudaSuccess;
}
static bool event_record(const Handles &h) { return cudaEventRecord(h.event, h.stream) == cudaSuccess; }
static bool event_query(const Handles &h) { return cudaEventQuery(h.event) == cudaSuccess; }

// The query of `name`, chosen once so that matching the name is in no
// call's time; null if the name is unknown.
static Query query_named(const char *name) {
    static const struct { const char *name; Query query; } known[] = {
        {"get-device", get_device}, {"ctx-get-device", ctx_get_device}, {"mem-pool", mem_pool},
        {"cu-mem-pool", cu_mem_pool}, {"default-pool", default_pool}, {"pool-reserve", pool_reserve},
        {"event-record", event_record}, {"event-query", event_query},
    };
    for (const auto &k : known)
        if (!strcmp(k.name, name)) return k.query;
    return nullptr;
}

static int queries(const char *name, std::vector<double> &ns) {
    Query query = query_named(name);
    if (!query) { fprintf(stderr, "hook_rate: no query named '%s'\n", name); return 1; }
    Handles h;
    if (cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&h.event, cudaEventDisableTiming) != cudaSuccess ||
        cudaDeviceGetDefaultMemPool(&h.pool, 0) != cudaSuccess || cudaEventRecord(h.event, h.stream) != cudaSuccess ||
        cudaStreamSynchronize(h.stream) != cudaSuccess)
        return 1;
    for (int b = 0; b < kBatches + 2; b++) {
        cudaStreamSynchronize(h.stream);
        double spent = 0;
        for (int i = 0; i < kBatch; i++) {
            walk();
            auto start = Clock::now();
            bool ok = query(h);
            spent += ns_since(start);
            if (!ok) { fprintf(stderr, "hook_rate: query %s failed\n", name); return 1; }
        }
        if (b >= 2) ns.push_back(spent / kBatch);
    }
    cudaStreamSynchronize(h.stream);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: hook_rate launch WORDS COLD_KIB | pair BYTES COLD_KIB | query NAME COLD_KIB\n"); return 2; }
    long what = atol(argv[2]);
    cold_bytes = (size_t)atol(argv[3]) << 10;
    cold = cold_bytes ? (volatile unsigned char *)calloc(cold_bytes, 1) : nullptr;
    std::vector<double> ns;
    int failed;
    if (!strcmp(argv[1], "launch")) {
        failed = what == 160 ? launches<160>(ns) : launches<16>(ns);
    } else if (!strcmp(argv[1], "pair")) {
        failed = pairs((size_t)what, ns);
    } else if (!strcmp(argv[1], "query")) {
        failed = queries(argv[2], ns);
    } else {
        fprintf(stderr, "hook_rate: '%s' is not launch, pair or query\n", argv[1]);
        return 2;
    }
    if (failed) { fprintf(stderr, "hook_rate: a call failed\n"); return 1; }
    std::sort(ns.begin(), ns.end());
    printf("median_ns=%.1f best_ns=%.1f\n", ns[ns.size() / 2], ns[0]);
    return 0;
}
