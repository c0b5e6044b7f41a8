/*
 * What the fake CUDA runtime (cudart.c) and the fake driver (cuda.c) share:
 * device memory that is host memory with a capacity per device, managed
 * memory that does not count against it, and the call log.
 *
 * Environment: FAKE_CUDA_CAPACITY (bytes per device, default 1 GiB),
 * FAKE_CUDA_DEVICES (default 2), FAKE_CUDA_NO_DEVICE=1 (every call fails with
 * "no device", as on a machine without a GPU), FAKE_CUDA_LOG (a file each
 * call appends one line to).
 *
 * Each library includes this file and so has its own table: a program that
 * uses both sees two separate pools of fake device memory.
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

enum { OK = 0, INVALID_VALUE = 1, MEMORY_ALLOCATION = 2, NO_DEVICE = 100, NOT_SUPPORTED = 801 };
#define MAX_DEVICES 8
#define BUCKETS 4096

/* base: what malloc gave, of which ptr is the first 256-byte boundary. */
struct block { void *ptr; size_t size; int device; int managed; int pooled; int freeing; struct block *next; void *base; };

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
/* FAKE_CUDA_MOVE_DELAY_MS: how long a prefetch keeps its caller, as moving
 * pages over the link does on a busy GPU (default 0). */
static size_t move_delay_ms;
/* FAKE_CUDA_POOL_PIECES=1: a pool's reserve lies in pieces, as CUDA's does
 * once blocks of many sizes come and go: an allocation grows the pool by a
 * chunk unless a whole chunk's worth lies unused, and a trim keeps every
 * chunk a live allocation sits in. */
static int pool_pieces;
/* FAKE_CUDA_POOL_CHUNK_MIB: the chunk a pool grows and trims by (default
 * 2); CUDA was seen to grow a pool by 32 MiB past its live allocations. */
static size_t pool_chunk = (size_t)2 << 20;
__attribute__((constructor)) static void read_settings(void) {
    capacity_bytes = env_size("FAKE_CUDA_CAPACITY", capacity_bytes);
    move_delay_ms = env_size("FAKE_CUDA_MOVE_DELAY_MS", 0);
    pool_pieces = env_size("FAKE_CUDA_POOL_PIECES", 0) != 0;
    pool_chunk = env_size("FAKE_CUDA_POOL_CHUNK_MIB", 2) << 20;
    if (!pool_chunk) pool_chunk = (size_t)2 << 20;
    devices = (int)env_size("FAKE_CUDA_DEVICES", devices);
    no_device_flag = env_size("FAKE_CUDA_NO_DEVICE", 0) != 0;
}
static size_t capacity(void) { return capacity_bytes; }
static int device_count(void) { return devices; }
static int no_device(void) { return no_device_flag; }
__attribute__((unused)) static void move_delay(void) {
    if (move_delay_ms) usleep((useconds_t)(move_delay_ms * 1000));
}

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

static size_t bucket(void *p) { return ((uintptr_t)p >> 8) % BUCKETS; }

static int fake_alloc(void **out, size_t size, int managed) {
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
    /* The allocator does not touch the pages: large fake blocks cost address
     * space only. Starts are 256-byte aligned, as CUDA's are; aligned by
     * hand rather than by posix_memalign, whose split chunks are not handed
     * back whole, so that a size freed and asked for again gets its old
     * start, as a tensor reallocated each step does. */
    void *base = size <= SIZE_MAX - 255 ? malloc(size + 255) : NULL;
    void *p = base ? (void *)(((uintptr_t)base + 255) & ~(uintptr_t)255) : NULL;
    struct block *b = malloc(sizeof *b);
    if (!p || !b) { free(base); free(b); pthread_mutex_unlock(&lock); return MEMORY_ALLOCATION; }
    *b = (struct block){p, size, dev, managed, 0, 0, table[bucket(p)], base};
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

static int fake_free(void *p) {
    if (no_device()) return NO_DEVICE;
    if (!p) return OK;
    pthread_mutex_lock(&lock);
    struct block **link = &table[bucket(p)];
    while (*link && (*link)->ptr != p) link = &(*link)->next;
    struct block *b = *link;
    /* Unknown, or its free queued on a stream already. */
    if (!b || b->freeing) { pthread_mutex_unlock(&lock); return INVALID_VALUE; }
    *link = b->next;
    if (!b->managed) used[b->device] -= b->size;
    pthread_mutex_unlock(&lock);
    free(b->base);
    free(b);
    return OK;
}

/* Stream-ordered pools, one per device (handle: device + 1), as CUDA's
 * default pools behave with a high release threshold: the reserve grows in
 * chunks (2 MiB, or FAKE_CUDA_POOL_CHUNK_MIB) as allocations need it, stays
 * reserved after frees, and is given back only by a trim, chunk by chunk.
 * The reserve is what the device holds. */
static size_t pool_reserved[MAX_DEVICES], pool_used[MAX_DEVICES];
/* The high-water marks CUDA keeps of both, reset by writing 0. */
static size_t pool_reserved_high[MAX_DEVICES], pool_used_high[MAX_DEVICES];

static int pool_alloc(void **out, size_t size) {
    int rc = fake_alloc(out, size, 0);
    if (rc != OK || size == 0) return rc;
    int dev = current_device;
    pthread_mutex_lock(&lock);
    struct block *b = find(*out);
    b->pooled = 1;
    used[dev] -= size; /* counted through the pool's reserve instead */
    if (pool_pieces && pool_reserved[dev] - pool_used[dev] < pool_chunk) {
        pool_reserved[dev] += pool_chunk;
        used[dev] += pool_chunk;
    }
    pool_used[dev] += size;
    while (pool_reserved[dev] < pool_used[dev]) {
        pool_reserved[dev] += pool_chunk;
        used[dev] += pool_chunk;
    }
    if (pool_used[dev] > pool_used_high[dev]) pool_used_high[dev] = pool_used[dev];
    if (pool_reserved[dev] > pool_reserved_high[dev]) pool_reserved_high[dev] = pool_reserved[dev];
    pthread_mutex_unlock(&lock);
    return OK;
}

/* A pooled block goes back to its pool: its bytes stay reserved. */
static int pool_free(void *p) {
    pthread_mutex_lock(&lock);
    struct block *b = p ? find(p) : NULL;
    int pooled = b && b->pooled;
    if (pooled) {
        pool_used[b->device] -= b->size;
        used[b->device] += b->size; /* fake_free subtracts it again */
    }
    pthread_mutex_unlock(&lock);
    return fake_free(p);
}

/* The device's pool (cudaDeviceGetMemPool, cuDeviceGetMemPool). */
static int pool_of_device(void **pool, int device) {
    if (no_device()) return NO_DEVICE;
    if (!pool || device < 0 || device >= device_count()) return INVALID_VALUE;
    *pool = (void *)(uintptr_t)(device + 1);
    return OK;
}

/* `bytes` rounded up to whole chunks. */
static size_t whole_chunks(size_t bytes) { return (bytes + pool_chunk - 1) / pool_chunk * pool_chunk; }

/* cudaMemPoolTrimTo, cuMemPoolTrimTo (`name`, for the log). */
static int pool_trim(const char *name, void *pool, size_t keep) {
    int dev = (int)(uintptr_t)pool - 1;
    if (dev < 0 || dev >= device_count()) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    size_t target = pool_used[dev] > keep ? pool_used[dev] : keep;
    /* Whole chunks only, as CUDA's: one that a live allocation sits in
     * stays reserved. */
    target = whole_chunks(target);
    /* A reserve in pieces: each live allocation keeps the chunks it sits in. */
    if (pool_pieces) {
        size_t held = 0;
        for (size_t i = 0; i < BUCKETS; i++)
            for (struct block *b = table[i]; b; b = b->next)
                if (b->pooled && b->device == dev)
                    held += whole_chunks(b->size);
        if (held > target) target = held;
    }
    if (target < pool_reserved[dev]) {
        used[dev] -= pool_reserved[dev] - target;
        pool_reserved[dev] = target;
    }
    pthread_mutex_unlock(&lock);
    trace("%s pool=%d keep=%zu", name, dev + 1, keep);
    return OK;
}

/* cudaMemPoolAttrReservedMemCurrent (5) and cudaMemPoolAttrUsedMemCurrent (7),
 * the driver's CU_MEMPOOL_ATTR_* of the same numbers. */
/* Attributes 5 to 8: reserved now, its high-water mark, used now, its
 * high-water mark (cudaMemPoolAttr and CUmemPool_attribute alike). */
static int pool_attribute(void *pool, int attribute, void *value) {
    int dev = (int)(uintptr_t)pool - 1;
    if (dev < 0 || dev >= device_count() || dev >= MAX_DEVICES || !value) return INVALID_VALUE;
    if (attribute < 5 || attribute > 8) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    size_t v = attribute == 5 ? pool_reserved[dev] : attribute == 6 ? pool_reserved_high[dev]
             : attribute == 7 ? pool_used[dev] : pool_used_high[dev];
    pthread_mutex_unlock(&lock);
    *(unsigned long long *)value = v;
    return OK;
}

/* Writing 0 to a high-water mark resets it to the current value. */
static int pool_set_attribute(void *pool, int attribute, void *value) {
    int dev = (int)(uintptr_t)pool - 1;
    if (dev < 0 || dev >= device_count() || dev >= MAX_DEVICES || !value) return INVALID_VALUE;
    if ((attribute != 6 && attribute != 8) || *(unsigned long long *)value != 0) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (attribute == 6) pool_reserved_high[dev] = pool_reserved[dev];
    else pool_used_high[dev] = pool_used[dev];
    pthread_mutex_unlock(&lock);
    trace("pool set attribute %d", attribute);
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

/* Whether this library's stream-ordered frees wait for their stream (where
 * kernels take time: the fake's cost model), and queues `fn(arg)` on
 * `stream` after the work there (0 if it could not): each library's own. */
static int ordered_frees(void);
static int queue_after(void *stream, void (*fn)(void *), void *arg);

/* A stream-ordered free reached on its stream. */
static void free_queued(void *p) {
    pthread_mutex_lock(&lock);
    struct block *b = find(p);
    if (b) b->freeing = 0;
    pthread_mutex_unlock(&lock);
    pool_free(p);
}

/* cudaFreeAsync, cuMemFreeAsync and their _ptsz forms (`name`, for the log):
 * the real libraries refuse managed memory here. A pooled block goes at
 * once, or, where frees are stream-ordered, once the work queued before
 * it on `stream` has run (which may still write it); freed again before
 * then, it is refused. */
static int fake_free_async(const char *name, void *p, void *stream) {
    int rc = -1, queued = 0;
    pthread_mutex_lock(&lock);
    struct block *b = p ? find(p) : NULL;
    if (b && b->freeing) rc = INVALID_VALUE;
    else if (b && b->pooled && ordered_frees()) b->freeing = queued = 1;
    pthread_mutex_unlock(&lock);
    if (queued && queue_after(stream, free_queued, p)) rc = OK;
    else if (queued) {
        queued = 0;
        free_queued(p);
        rc = OK;
    }
    if (rc == -1) rc = p && is_managed(p) ? INVALID_VALUE : pool_free(p);
    trace("%s ptr=%p rc=%d queued=%d", name, p, rc, queued);
    return rc;
}

/* cudaMemGetInfo, cuMemGetInfo_v2 (`name`, for the log). */
static int fake_mem_info(const char *name, size_t *free_bytes, size_t *total) {
    if (no_device()) return NO_DEVICE;
    pthread_mutex_lock(&lock);
    *total = capacity();
    *free_bytes = capacity() - used[current_device];
    pthread_mutex_unlock(&lock);
    trace("%s device=%d", name, current_device);
    return OK;
}


/* Parameter layouts of fake kernels, as a module's metadata describes them
 * (the runtime's and the driver's tables are separate, as registering a
 * kernel with one says nothing to the other). Offsets follow C's rules:
 * each parameter aligned to its size, up to 8. A kernel without a layout
 * has no metadata, as cuBLAS's kernels have none. */
#define MAX_LAYOUTS 64
#define MAX_PARAMS 16
static struct { const void *fn; int count; size_t offset[MAX_PARAMS], size[MAX_PARAMS]; } layouts[MAX_LAYOUTS];
static int layout_count;
static void set_params(const void *fn, int count, const size_t *sizes) {
    if (count > MAX_PARAMS) return;
    /* A function described again (another module's, at a reused address)
     * takes its entry's place. */
    int at_entry = layout_count;
    for (int i = 0; i < layout_count; i++)
        if (layouts[i].fn == fn) at_entry = i;
    if (at_entry >= MAX_LAYOUTS) return;
    size_t at = 0;
    layouts[at_entry].fn = fn;
    layouts[at_entry].count = count;
    for (int i = 0; i < count; i++) {
        size_t align = sizes[i] < 8 ? sizes[i] : 8;
        if (align) at = (at + align - 1) / align * align;
        layouts[at_entry].offset[i] = at;
        layouts[at_entry].size[i] = sizes[i];
        at += sizes[i];
    }
    if (at_entry == layout_count) layout_count++;
}
static int param_info(const void *fn, size_t index, size_t *offset, size_t *size) {
    for (int i = 0; i < layout_count; i++) {
        if (layouts[i].fn != fn) continue;
        if (index >= (size_t)layouts[i].count) return INVALID_VALUE;
        *offset = layouts[i].offset[index];
        if (size) *size = layouts[i].size[index];
        return OK;
    }
    return INVALID_VALUE;
}
