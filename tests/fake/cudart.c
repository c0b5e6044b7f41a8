#define _GNU_SOURCE
/*
 * A fake CUDA runtime for testing vramshare without a GPU.
 *
 * Built twice by the tests: with FAKE_CUDA_MAJOR=13 as libcudart.so.13 and
 * with FAKE_CUDA_MAJOR=12 as libcudart.so.12, each with a version script that
 * gives its symbols NVIDIA's version node, so that programs linked against it
 * call through the PLT exactly as they call the real runtime.
 *
 * Device memory is host memory with a capacity per device; managed memory is
 * host memory that does not count against it. Every call is appended to the
 * file named by FAKE_CUDA_LOG, one line each, so tests can assert what the
 * shim asked for (notably the ABI of cudaMemAdvise and cudaMemPrefetchAsync,
 * which differs between 12 and 13).
 *
 * Memory, settings and the log: memory.h.
 */
#include "memory.h"
#include "streams.h"

#include <dlfcn.h>

#ifndef FAKE_CUDA_MAJOR
#error "build with -DFAKE_CUDA_MAJOR=12 or 13"
#endif

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
struct cudaMemLocation { int type; int id; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };

cudaError_t cudaRuntimeGetVersion(int *v) { *v = FAKE_CUDA_MAJOR == 13 ? 13000 : 12080; return OK; }
cudaError_t cudaGetDeviceCount(int *n) { if (no_device()) return NO_DEVICE; *n = device_count(); return OK; }
cudaError_t cudaGetDevice(int *d) { if (no_device()) return NO_DEVICE; *d = current_device; return OK; }
cudaError_t cudaSetDevice(int d) {
    if (no_device()) return NO_DEVICE;
    if (d < 0 || d >= device_count() || d >= MAX_DEVICES) return INVALID_VALUE;
    current_device = d;
    return OK;
}
/* As NVIDIA's runtime does when it starts, the driver beside it is loaded
 * (the shim finds the driver's functions only in a loaded driver). */
static void (*land_driver_copies)(void);
__attribute__((constructor)) static void load_driver(void) {
    Dl_info self;
    if (!dladdr((void *)load_driver, &self) || !self.dli_fname) return;
    char path[4096];
    snprintf(path, sizeof path, "%s", self.dli_fname);
    char *slash = strrchr(path, '/');
    if (!slash) return;
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libcuda.so.1");
    void *driver = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    /* Loaded locally: its own symbols are found through its handle. */
    if (!driver) return;
    land_driver_copies = (void (*)(void))dlsym(driver, "cudaFakeLandCopies");
    driver_link_cost = (void (*)(const void *, const void *, size_t))dlsym(driver, "cudaFakeLinkCost");
    driver_read_in_place = (size_t (*)(const unsigned char *, size_t))dlsym(driver, "cudaFakeReadInPlace");
    driver_launch_wait = (void (*)(void))dlsym(driver, "cudaFakeLaunchWait");
}

/* As CUDA's legacy IPC: only memory cudaMalloc made can be exported. */
cudaError_t cudaIpcGetMemHandle(void *handle, void *p) {
    pthread_mutex_lock(&lock);
    struct block *b = find(p);
    int ours = b && !b->managed;
    pthread_mutex_unlock(&lock);
    if (ours) memset(handle, 0, 64);
    trace("cudaIpcGetMemHandle ptr=%p rc=%d", p, ours ? OK : INVALID_VALUE);
    return ours ? OK : INVALID_VALUE;
}

cudaError_t cudaDeviceSynchronize(void) {
    if (no_device()) return NO_DEVICE;
    drain_all();
    /* The driver's copies held back (FAKE_CUDA_DEFER_COPIES) land too. */
    if (land_driver_copies) land_driver_copies();
    return OK;
}

cudaError_t cudaMalloc(void **p, size_t size) {
    cudaError_t rc = fake_alloc(p, size, 0);
    trace("cudaMalloc size=%zu device=%d rc=%d ptr=%p", size, current_device, rc, rc ? NULL : *p);
    return rc;
}
cudaError_t cudaMallocManaged(void **p, size_t size, unsigned flags) {
    cudaError_t rc = fake_alloc(p, size, 1);
    trace("cudaMallocManaged size=%zu flags=%u rc=%d ptr=%p", size, flags, rc, rc ? NULL : *p);
    return rc;
}
cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    size_t row = (width + 511) / 512 * 512;
    cudaError_t rc = fake_alloc(p, row * height, 0);
    if (rc == OK) *pitch = row;
    trace("cudaMallocPitch width=%zu height=%zu rc=%d", width, height, rc);
    return rc;
}
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e) {
    size_t row = (e.width + 511) / 512 * 512;
    void *p = NULL;
    cudaError_t rc = fake_alloc(&p, row * e.height * e.depth, 0);
    if (rc == OK) *pp = (struct cudaPitchedPtr){p, row, e.width, e.height};
    trace("cudaMalloc3D width=%zu height=%zu depth=%zu rc=%d", e.width, e.height, e.depth, rc);
    return rc;
}
#define ASYNC_ALLOC(name, ...)                                              \
    cudaError_t name(void **p, size_t size, __VA_ARGS__) {                  \
        cudaError_t rc = pool_alloc(p, size);                               \
        trace(#name " size=%zu rc=%d", size, rc);                           \
        return rc;                                                          \
    }
ASYNC_ALLOC(cudaMallocAsync, cudaStream_t s)
ASYNC_ALLOC(cudaMallocAsync_ptsz, cudaStream_t s)
ASYNC_ALLOC(cudaMallocFromPoolAsync, cudaMemPool_t pool, cudaStream_t s)
ASYNC_ALLOC(cudaMallocFromPoolAsync_ptsz, cudaMemPool_t pool, cudaStream_t s)

cudaError_t cudaFree(void *p) {
    cudaError_t rc = fake_free(p);
    trace("cudaFree ptr=%p rc=%d", p, rc);
    return rc;
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int device) { return pool_of_device(pool, device); }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) { return pool_of_device(pool, device); }
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, int attribute, void *value) {
    return pool_attribute(pool, attribute, value);
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, int attribute, void *value) {
    return pool_set_attribute(pool, attribute, value);
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { return pool_trim("cudaMemPoolTrimTo", pool, keep); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return fake_free_async("cudaFreeAsync", p, s); }
cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return fake_free_async("cudaFreeAsync_ptsz", p, s); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    return fake_mem_info("cudaMemGetInfo", free_bytes, total);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (no_device()) return NO_DEVICE;
    *s = new_stream();
    trace("cudaStreamCreateWithFlags flags=%u device=%d", flags, current_device);
    return *s ? OK : MEMORY_ALLOCATION;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    struct fake_stream *stream = stream_of(s);
    if (!stream) return INVALID_VALUE;
    drain(stream);
    return OK;
}

/* Copies: the synchronous one waits for every stream first (as the legacy
 * null stream does), the asynchronous one runs on its stream. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    if (no_device()) return NO_DEVICE;
    drain_all();
    memcpy(dst, src, n);
    return OK;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s) {
    if (no_device()) return NO_DEVICE;
    return enqueue_copy(dst, src, n, s);
}
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, int kind, cudaStream_t s) {
    return cudaMemcpyAsync(dst, src, n, kind, s);
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
    if (no_device()) return NO_DEVICE;
    drain_all();
    memset(p, value, n);
    return OK;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    if (no_device()) return NO_DEVICE;
    return enqueue_set(p, value, n, s);
}
cudaError_t cudaMemsetAsync_ptsz(void *p, int value, size_t n, cudaStream_t s) { return cudaMemsetAsync(p, value, n, s); }
/* Rows: a copy or memset of each, in order on the stream. */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind, cudaStream_t s) {
    if (no_device()) return NO_DEVICE;
    if (width > dpitch || width > spitch) return INVALID_VALUE;
    trace("cudaMemcpy2DAsync dst=%p width=%zu height=%zu", dst, width, height);
    for (size_t row = 0; row < height; row++) {
        int rc = enqueue_copy((char *)dst + row * dpitch, (const char *)src + row * spitch, width, s);
        if (rc != OK) return rc;
    }
    return OK;
}
cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind, cudaStream_t s) {
    return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, s);
}
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind) {
    int rc = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, 0);
    drain_all();
    return rc;
}
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s) {
    if (no_device()) return NO_DEVICE;
    for (size_t row = 0; row < height; row++) {
        int rc = enqueue_set((char *)p + row * pitch, value, width, s);
        if (rc != OK) return rc;
    }
    return OK;
}
cudaError_t cudaMemset2DAsync_ptsz(void *p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s) {
    return cudaMemset2DAsync(p, pitch, value, width, height, s);
}
cudaError_t cudaMemset2D(void *p, size_t pitch, int value, size_t width, size_t height) {
    int rc = cudaMemset2DAsync(p, pitch, value, width, height, 0);
    drain_all();
    return rc;
}
/* The per-thread default stream's synchronous forms: the same here. */
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, int kind) { trace("cudaMemcpy_ptds dst=%p", dst); return cudaMemcpy(dst, src, n, kind); }
cudaError_t cudaMemset_ptds(void *p, int value, size_t n) { return cudaMemset(p, value, n); }
cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, int kind) {
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int value, size_t width, size_t height) { return cudaMemset2D(p, pitch, value, width, height); }
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t n, cudaStream_t s) {
    if (no_device()) return NO_DEVICE;
    return enqueue_copy(dst, src, n, s);
}
cudaError_t cudaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device, size_t n) {
    int rc = cudaMemcpyPeerAsync(dst, dst_device, src, src_device, n, 0);
    drain_all();
    return rc;
}

/* Events, recorded and waited for on streams. */
cudaError_t cudaEventCreateWithFlags(void **e, unsigned flags) {
    if (no_device()) return NO_DEVICE;
    *e = calloc(1, sizeof(struct fake_event));
    trace("cudaEventCreateWithFlags flags=%u", flags);
    return *e ? OK : MEMORY_ALLOCATION;
}
cudaError_t cudaEventCreate(void **e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(void *e) { return e ? OK : INVALID_VALUE; }
cudaError_t cudaEventRecord(void *e, cudaStream_t s) { return e ? record_event(e, s) : INVALID_VALUE; }
cudaError_t cudaEventRecord_ptsz(void *e, cudaStream_t s) { return cudaEventRecord(e, s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, void *e, unsigned flags) { return e ? wait_event(s, e) : INVALID_VALUE; }
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, void *e, unsigned flags) { return cudaStreamWaitEvent(s, e, flags); }
cudaError_t cudaEventQuery(void *e) { return !e ? INVALID_VALUE : event_done(e) ? OK : 600; /* cudaErrorNotReady */ }
cudaError_t cudaEventSynchronize(void *e) {
    if (!e) return INVALID_VALUE;
    trace("cudaEventSynchronize");
    sync_event(e);
    return OK;
}

/* A kernel that runs (on its stream, with the arguments it was launched
 * with), for tests of what the data holds when. */
void cudaFakeSetKernel(const void *kernel, void (*body)(void **args)) {
    pthread_mutex_lock(&stream_lock);
    if (body_count < 64) {
        bodies[body_count].kernel = kernel;
        bodies[body_count].body = body;
        body_count++;
    }
    pthread_mutex_unlock(&stream_lock);
}

__attribute__((unused)) static const char *where(struct cudaMemLocation loc, char *buf) {
    if (loc.type == 2) return "host";
    snprintf(buf, 32, loc.type == 1 ? "device:%d" : "type%d:%d", loc.type == 1 ? loc.id : loc.type, loc.id);
    return buf;
}
__attribute__((unused)) static const char *where_id(int id, char *buf) {
    if (id == -1) return "host";
    snprintf(buf, 32, "device:%d", id);
    return buf;
}

#if FAKE_CUDA_MAJOR >= 13
cudaError_t cudaMemAdvise(const void *p, size_t n, int advice, struct cudaMemLocation loc) {
    char buf[32];
    cudaError_t rc = is_managed_range(p, n) ? OK : INVALID_VALUE;
    trace("cudaMemAdvise abi=13 ptr=%p size=%zu advice=%d loc=%s rc=%d", p, n, advice, where(loc, buf), rc);
    return rc;
}
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t s) {
    char buf[32];
    cudaError_t rc = is_managed_range(p, n) ? OK : INVALID_VALUE;
    move_delay();
    trace("cudaMemPrefetchAsync abi=13 ptr=%p size=%zu loc=%s stream=%s rc=%d", p, n, where(loc, buf), s ? "own" : "default", rc);
    return rc;
}
#else
cudaError_t cudaMemAdvise(const void *p, size_t n, int advice, int device) {
    char buf[32];
    cudaError_t rc = is_managed_range(p, n) ? OK : INVALID_VALUE;
    trace("cudaMemAdvise abi=12 ptr=%p size=%zu advice=%d loc=%s rc=%d", p, n, advice, where_id(device, buf), rc);
    return rc;
}
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, int device, cudaStream_t s) {
    char buf[32];
    cudaError_t rc = is_managed_range(p, n) ? OK : INVALID_VALUE;
    move_delay();
    trace("cudaMemPrefetchAsync abi=12 ptr=%p size=%zu loc=%s stream=%s rc=%d", p, n, where_id(device, buf), s ? "own" : "default", rc);
    return rc;
}
#endif

/* Driver entry points, as the real runtime gives them: looked up in the
 * loaded libcuda.so.1 through its own cuGetProcAddress_v2 (found with dlsym,
 * not through the program's symbol table). */
typedef cudaError_t (*proc_address_fn)(const char *, void **, int, unsigned long long, int *);
static cudaError_t entry_point(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    proc_address_fn lookup = driver ? (proc_address_fn)dlsym(driver, "cuGetProcAddress_v2") : NULL;
    if (!lookup) return 35; /* cudaErrorInsufficientDriver */
    cudaError_t rc = lookup(symbol, pfn, version, flags, status);
    trace("cudaGetDriverEntryPoint symbol=%s rc=%d", symbol, rc);
    return rc ? 500 : OK; /* cudaErrorSymbolNotFound */
}
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags, int *status) {
    return entry_point(symbol, pfn, FAKE_CUDA_MAJOR * 1000, flags, status);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **pfn, unsigned long long flags, int *status) {
    return entry_point(symbol, pfn, FAKE_CUDA_MAJOR * 1000, flags | 2, status);
}
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned version, unsigned long long flags, int *status) {
    return entry_point(symbol, pfn, (int)version, flags, status);
}
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **pfn, unsigned version, unsigned long long flags, int *status) {
    return entry_point(symbol, pfn, (int)version, flags | 2, status);
}

/* Kernel launches: a fake kernel is any host address; each launch is logged
 * with the path it came by, and does nothing else. A program that registers
 * its kernels with this runtime (cudaFakeRegisterKernel, as a real program's
 * module constructor does) has every other kernel refused, as the real
 * runtime refuses another runtime's: cudaErrorInvalidDeviceFunction. */
#define INVALID_DEVICE_FUNCTION 98
static const void *registered[64];
static int registered_count;
void cudaFakeRegisterKernel(const void *kernel) {
    if (registered_count < 64) registered[registered_count++] = kernel;
}
static int known_kernel(const void *kernel) {
    if (!registered_count) return 1;
    for (int i = 0; i < registered_count; i++)
        if (registered[i] == kernel) return 1;
    return 0;
}
/* Parameter metadata (see memory.h), with the runtime's last error: a
 * failed query leaves one behind, as the real runtime does, and the job's
 * next cudaGetLastError would see it. */
static int last_error;
void cudaFakeSetParams(const void *kernel, int count, const size_t *sizes) { set_params(kernel, count, sizes); }
cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size) {
    int rc = param_info(func, index, offset, size);
    if (rc) last_error = rc;
    return rc;
}
cudaError_t cudaGetFuncBySymbol(void **function, const void *symbol) { *function = (void *)symbol; return OK; }
cudaError_t cudaPeekAtLastError(void) { return last_error; }
cudaError_t cudaGetLastError(void) { int rc = last_error; last_error = OK; return rc; }

/* FAKE_CUDA_FAULT_AFTER=N: the Nth launch through the runtime and every
 * one after fail with cudaErrorIllegalAddress, as launches do once a
 * kernel has faulted (the error is sticky). */
#define ILLEGAL_ADDRESS 700
static int faulted(void) {
    static long after = -1, launches;
    if (after < 0) after = getenv("FAKE_CUDA_FAULT_AFTER") ? atol(getenv("FAKE_CUDA_FAULT_AFTER")) : 0;
    return after > 0 && __atomic_add_fetch(&launches, 1, __ATOMIC_SEQ_CST) >= after;
}

typedef struct { unsigned x, y, z; } dim3;
#define LAUNCH(name, first)                                                                          \
    cudaError_t name(const void *first, dim3 grid, dim3 block, void **args, size_t shared,             \
                     cudaStream_t stream) {                                                          \
        if (no_device()) return NO_DEVICE;                                                           \
        int rc = known_kernel(first) ? OK : INVALID_DEVICE_FUNCTION;                                 \
        if (rc == OK && faulted()) rc = ILLEGAL_ADDRESS;                                             \
        if (rc == OK && enqueue_kernel(first, args, stream) < 0) rc = INVALID_VALUE;                  \
        trace(#name " kernel=%p grid=%u block=%u runtime=%d rc=%d", first, grid.x, block.x,           \
              FAKE_CUDA_MAJOR, rc);                                                                  \
        return rc;                                                                                   \
    }
LAUNCH(cudaLaunchKernel, func)
LAUNCH(cudaLaunchKernel_ptsz, func)
LAUNCH(__cudaLaunchKernel, kernel)
LAUNCH(__cudaLaunchKernel_ptsz, kernel)
LAUNCH(cudaLaunchCooperativeKernel, func)
LAUNCH(cudaLaunchCooperativeKernel_ptsz, func)
cudaError_t cudaLaunchKernelExC(const void *config, const void *func, void **args) {
    trace("cudaLaunchKernelExC kernel=%p", func);
    return no_device() ? NO_DEVICE : OK;
}
cudaError_t cudaLaunchKernelExC_ptsz(const void *config, const void *func, void **args) {
    trace("cudaLaunchKernelExC_ptsz kernel=%p", func);
    return no_device() ? NO_DEVICE : OK;
}
/* Stream capture: a capture ends in a graph, a graph is instantiated into
 * an executable graph; each is a fresh address, and each call is logged. */
static char graph_handles[64];
static int graphs_made;
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode) { trace("cudaStreamBeginCapture stream=%p", stream); return OK; }
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, int mode) { trace("cudaStreamBeginCapture_ptsz stream=%p", stream); return OK; }
static cudaError_t end_capture(const char *name, cudaStream_t stream, void **graph) {
    *graph = &graph_handles[graphs_made++ % 64];
    trace("%s stream=%p graph=%p", name, stream, *graph);
    return OK;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, void **graph) { return end_capture("cudaStreamEndCapture", stream, graph); }
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, void **graph) { return end_capture("cudaStreamEndCapture_ptsz", stream, graph); }
static cudaError_t instantiate(const char *name, void **exec, void *graph) {
    *exec = &graph_handles[graphs_made++ % 64];
    trace("%s graph=%p exec=%p", name, graph, *exec);
    return OK;
}
cudaError_t cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags) { return instantiate("cudaGraphInstantiate", exec, graph); }
cudaError_t cudaGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) { return instantiate("cudaGraphInstantiateWithFlags", exec, graph); }
cudaError_t cudaGraphInstantiateWithParams(void **exec, void *graph, void *params) { return instantiate("cudaGraphInstantiateWithParams", exec, graph); }
cudaError_t cudaGraphInstantiateWithParams_ptsz(void **exec, void *graph, void *params) { return instantiate("cudaGraphInstantiateWithParams_ptsz", exec, graph); }
cudaError_t cudaGraphExecDestroy(void *exec) { trace("cudaGraphExecDestroy exec=%p", exec); return OK; }
cudaError_t cudaGraphDestroy(void *graph) { trace("cudaGraphDestroy graph=%p", graph); return OK; }

cudaError_t cudaGraphLaunch(void *graph, cudaStream_t stream) {
    trace("cudaGraphLaunch graph=%p", graph);
    return no_device() ? NO_DEVICE : OK;
}
cudaError_t cudaGraphLaunch_ptsz(void *graph, cudaStream_t stream) {
    trace("cudaGraphLaunch_ptsz graph=%p", graph);
    return no_device() ? NO_DEVICE : OK;
}
