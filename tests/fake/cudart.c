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
 * Environment: FAKE_CUDA_CAPACITY (bytes per device, default 1 GiB),
 * FAKE_CUDA_DEVICES (default 2), FAKE_CUDA_NO_DEVICE=1 (every call fails with
 * cudaErrorNoDevice, as on a machine without a GPU), FAKE_CUDA_LOG.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FAKE_CUDA_MAJOR
#error "build with -DFAKE_CUDA_MAJOR=12 or 13"
#endif

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
struct cudaMemLocation { int type; int id; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };

enum { OK = 0, INVALID_VALUE = 1, MEMORY_ALLOCATION = 2, NO_DEVICE = 100 };
#define MAX_DEVICES 8
#define BUCKETS 4096

struct block { void *ptr; size_t size; int device; int managed; struct block *next; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct block *table[BUCKETS];
static size_t used[MAX_DEVICES];
static __thread int current_device;
static int log_fd = -2;

static size_t env_size(const char *name, size_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : fallback;
}
/* Read once at load, so that the fake's own cost stays small next to the
 * shim's in benchmarks. */
static size_t capacity_bytes = (size_t)1 << 30;
static int devices = 2, no_device_flag;
__attribute__((constructor)) static void read_settings(void) {
    capacity_bytes = env_size("FAKE_CUDA_CAPACITY", capacity_bytes);
    devices = (int)env_size("FAKE_CUDA_DEVICES", devices);
    no_device_flag = env_size("FAKE_CUDA_NO_DEVICE", 0) != 0;
}
static size_t capacity(void) { return capacity_bytes; }
static int device_count(void) { return devices; }
static int no_device(void) { return no_device_flag; }

static void trace(const char *fmt, ...) {
    if (log_fd == -2) {
        const char *path = getenv("FAKE_CUDA_LOG");
        log_fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    }
    if (log_fd < 0) return;
    char line[512];
    int n = snprintf(line, sizeof line, "pid=%d ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    (void)!write(log_fd, line, n); /* one write per line: lines never interleave */
}

static size_t bucket(void *p) { return ((uintptr_t)p >> 4) % BUCKETS; }

static cudaError_t fake_alloc(void **out, size_t size, int managed) {
    if (no_device()) return NO_DEVICE;
    if (!out) return INVALID_VALUE;
    if (size == 0) { *out = NULL; return OK; }
    int dev = current_device;
    pthread_mutex_lock(&lock);
    if (!managed && (size > capacity() || used[dev] > capacity() - size)) {
        pthread_mutex_unlock(&lock);
        return MEMORY_ALLOCATION;
    }
    if (managed && size > ((size_t)1 << 40)) { pthread_mutex_unlock(&lock); return MEMORY_ALLOCATION; }
    /* malloc does not touch the pages: large fake blocks cost address space only. */
    void *p = malloc(size);
    struct block *b = malloc(sizeof *b);
    if (!p || !b) { free(p); free(b); pthread_mutex_unlock(&lock); return MEMORY_ALLOCATION; }
    *b = (struct block){p, size, dev, managed, table[bucket(p)]};
    table[bucket(p)] = b;
    if (!managed) used[dev] += size;
    pthread_mutex_unlock(&lock);
    *out = p;
    return OK;
}

static struct block *find(const void *p) {
    for (struct block *b = table[bucket((void *)p)]; b; b = b->next)
        if (b->ptr == p) return b;
    return NULL;
}

static cudaError_t fake_free(void *p) {
    if (no_device()) return NO_DEVICE;
    if (!p) return OK;
    pthread_mutex_lock(&lock);
    struct block **link = &table[bucket(p)];
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    struct block *b = *link;
    if (!b) { pthread_mutex_unlock(&lock); return INVALID_VALUE; }
    *link = b->next;
    if (!b->managed) used[b->device] -= b->size;
    pthread_mutex_unlock(&lock);
    free(b->ptr);
    free(b);
    return OK;
}

/* Whether [p, p + n) lies inside one managed allocation (advice and
 * prefetches may name part of a block). */
static int is_managed_range(const void *p, size_t n) {
    const char *start = p;
    int managed = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < BUCKETS && !managed; i++)
        for (struct block *b = table[i]; b && !managed; b = b->next)
            managed = b->managed && start >= (char *)b->ptr && n <= b->size && start - (char *)b->ptr <= (ptrdiff_t)(b->size - n);
    pthread_mutex_unlock(&lock);
    return managed;
}
static int is_managed(const void *p) {
    pthread_mutex_lock(&lock);
    struct block *b = find(p);
    int managed = b && b->managed;
    pthread_mutex_unlock(&lock);
    return managed;
}

cudaError_t cudaRuntimeGetVersion(int *v) { *v = FAKE_CUDA_MAJOR == 13 ? 13000 : 12080; return OK; }
cudaError_t cudaGetDeviceCount(int *n) { if (no_device()) return NO_DEVICE; *n = device_count(); return OK; }
cudaError_t cudaGetDevice(int *d) { if (no_device()) return NO_DEVICE; *d = current_device; return OK; }
cudaError_t cudaSetDevice(int d) {
    if (no_device()) return NO_DEVICE;
    if (d < 0 || d >= device_count() || d >= MAX_DEVICES) return INVALID_VALUE;
    current_device = d;
    return OK;
}
cudaError_t cudaDeviceSynchronize(void) { return no_device() ? NO_DEVICE : OK; }

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
        cudaError_t rc = fake_alloc(p, size, 0);                            \
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
static cudaError_t free_async(const char *name, void *p) {
    /* The real runtime refuses managed memory here. */
    cudaError_t rc = p && is_managed(p) ? INVALID_VALUE : fake_free(p);
    trace("%s ptr=%p rc=%d", name, p, rc);
    return rc;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return free_async("cudaFreeAsync", p); }
cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return free_async("cudaFreeAsync_ptsz", p); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    if (no_device()) return NO_DEVICE;
    pthread_mutex_lock(&lock);
    *total = capacity();
    *free_bytes = capacity() - used[current_device];
    pthread_mutex_unlock(&lock);
    trace("cudaMemGetInfo device=%d", current_device);
    return OK;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (no_device()) return NO_DEVICE;
    *s = malloc(1);
    trace("cudaStreamCreateWithFlags flags=%u device=%d", flags, current_device);
    return OK;
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
    trace("cudaMemPrefetchAsync abi=12 ptr=%p size=%zu loc=%s stream=%s rc=%d", p, n, where_id(device, buf), s ? "own" : "default", rc);
    return rc;
}
#endif
