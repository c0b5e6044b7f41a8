/*
 * A fake CUDA driver (libcuda.so.1) for testing vramshare's driver-API hooks
 * without a GPU: the driver's allocation calls over the memory of memory.h,
 * each logged. Advice and prefetch exist in both forms, the CUdevice one
 * and the CUmemLocation one (`_v2`), and log which was called.
 */
#define _GNU_SOURCE
#include "memory.h"

#include <sys/mman.h>
#include <dlfcn.h>

#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef struct { int type; int id; } CUmemLocation;

/* CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID (134): host node 1 is nearest. */
/* The physical GPU behind the process's device `ordinal`: the
 * ordinal-th entry of CUDA_VISIBLE_DEVICES (numbers only), else itself. */
static int physical(int ordinal) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!visible || !*visible) return ordinal;
    for (int i = 0; *visible; i++) {
        char *end;
        long n = strtol(visible, &end, 10);
        if (end == visible) return ordinal;
        if (i == ordinal) return (int)n;
        visible = *end == ',' ? end + 1 : end;
    }
    return ordinal;
}
/* Attributes: 134 (host NUMA node id: 1); the PCI address, 33 (bus: 0x18
 * plus the physical GPU's number), 34 (device: 0), 50 (domain: 0). */
CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    if (no_device()) return NO_DEVICE;
    if (device < 0 || device >= device_count()) return INVALID_VALUE;
    switch (attribute) {
    case 134: *value = 1; return OK;
    case 33: *value = 0x18 + physical(device); return OK;
    case 34: case 50: *value = 0; return OK;
    default: return INVALID_VALUE;
    }
}
CUresult cuInit(unsigned flags) { return no_device() ? NO_DEVICE : OK; }
CUresult cuDeviceGetCount(int *n) { if (no_device()) return NO_DEVICE; *n = device_count(); return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { if (no_device()) return NO_DEVICE; *d = current_device; return OK; }
/* One context, current on every thread that asks; made current again, or
 * a capture mode exchanged, the call is logged. */
static char the_context;
CUresult cuCtxGetCurrent(void **ctx) { if (!ctx) return INVALID_VALUE; *ctx = no_device() ? NULL : &the_context; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { trace("cuCtxSetCurrent ctx=%p", ctx); return ctx == &the_context || !ctx ? OK : INVALID_VALUE; }
CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    if (!mode) return INVALID_VALUE;
    trace("cuThreadExchangeStreamCaptureMode mode=%d", *mode);
    *mode = 0;
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    CUresult rc = fake_alloc((void **)p, size, 0);
    trace("cuMemAlloc_v2 size=%zu device=%d rc=%d ptr=%p", size, current_device, rc, rc ? NULL : (void *)*p);
    return rc;
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) {
    CUresult rc = fake_alloc((void **)p, size, 1);
    trace("cuMemAllocManaged size=%zu flags=%u rc=%d ptr=%p", size, flags, rc, rc ? NULL : (void *)*p);
    return rc;
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned element) {
    size_t row = (width + 511) / 512 * 512;
    CUresult rc = fake_alloc((void **)p, row * height, 0);
    if (rc == OK) *pitch = row;
    trace("cuMemAllocPitch_v2 width=%zu height=%zu element=%u rc=%d", width, height, element, rc);
    return rc;
}
#define ASYNC_ALLOC(name, ...)                                        \
    CUresult name(CUdeviceptr *p, size_t size, __VA_ARGS__) {         \
        CUresult rc = pool_alloc((void **)p, size);                   \
        trace(#name " size=%zu rc=%d", size, rc);                     \
        return rc;                                                    \
    }
ASYNC_ALLOC(cuMemAllocAsync, CUstream s)
ASYNC_ALLOC(cuMemAllocAsync_ptsz, CUstream s)
ASYNC_ALLOC(cuMemAllocFromPoolAsync, CUmemoryPool pool, CUstream s)
ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, CUmemoryPool pool, CUstream s)

CUresult cuMemFree_v2(CUdeviceptr p) {
    CUresult rc = fake_free((void *)p);
    trace("cuMemFree_v2 ptr=%p rc=%d", (void *)p, rc);
    return rc;
}
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device) { return pool_of_device(pool, device); }
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device) { return pool_of_device(pool, device); }
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attribute, void *value) {
    return pool_attribute(pool, attribute, value);
}
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attribute, void *value) {
    return pool_set_attribute(pool, attribute, value);
}
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) { return pool_trim("cuMemPoolTrimTo", pool, keep); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return fake_free_async("cuMemFreeAsync", (void *)p, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return fake_free_async("cuMemFreeAsync_ptsz", (void *)p, s); }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    return fake_mem_info("cuMemGetInfo_v2", free_bytes, total);
}

/* The runtime's streams, with the cost model on (driver_copies.h). */
static int on_runtime_streams(void);
static void *runtime_stream_new(void);
CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    if (no_device()) return NO_DEVICE;
    int shared = on_runtime_streams();
    *s = shared ? runtime_stream_new() : malloc(1);
    if (!*s) return MEMORY_ALLOCATION; /* the runtime's streams are all taken */
    trace("cuStreamCreate flags=%u streams=%s", flags, shared ? "runtime's" : "driver's");
    return OK;
}

static const char *where(int type, int id, char *buf) {
    if (type == 2) return "host";
    snprintf(buf, 32, "device:%d", id);
    return buf;
}
CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
    char buf[32];
    CUresult rc = is_managed_range((void *)p, n) ? OK : INVALID_VALUE;
    trace("cuMemAdvise_v2 ptr=%p size=%zu advice=%d loc=%s rc=%d", (void *)p, n, advice, where(loc.type, loc.id, buf), rc);
    return rc;
}
CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice d) {
    char buf[32];
    CUresult rc = is_managed_range((void *)p, n) ? OK : INVALID_VALUE;
    trace("cuMemAdvise ptr=%p size=%zu advice=%d loc=%s rc=%d", (void *)p, n, advice, where(d == -1 ? 2 : 1, d, buf), rc);
    return rc;
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s) {
    char buf[32];
    CUresult rc = is_managed_range((void *)p, n) ? OK : INVALID_VALUE;
    trace("cuMemPrefetchAsync_v2 ptr=%p size=%zu loc=%s stream=%s rc=%d", (void *)p, n, where(loc.type, loc.id, buf), s ? "own" : "default", rc);
    return rc;
}
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s) {
    char buf[32];
    CUresult rc = is_managed_range((void *)p, n) ? OK : INVALID_VALUE;
    trace("cuMemPrefetchAsync ptr=%p size=%zu loc=%s stream=%s rc=%d", (void *)p, n, where(d == -1 ? 2 : 1, d, buf), s ? "own" : "default", rc);
    return rc;
}

/* Physical memory of the virtual memory API: handles are small numbers,
 * each backed by a memory file of its size; device-located memory counts
 * against the device's capacity until it is both released and unmapped
 * everywhere, as the driver's does. Reserved address space is real address
 * space, inaccessible until mapped; a mapping maps the handle's file there,
 * so two mappings of one handle see the same bytes and a range remapped to
 * another handle sees that one's, as on a GPU. */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int requestedHandleTypes; CUmemLocation location; void *win32; unsigned char flags[8]; } CUmemAllocationProp;
#define MAX_HANDLES 8192
static struct { CUmemGenericAllocationHandle handle; size_t size; int device; int mappings; int released; int fd; } handles[MAX_HANDLES];
static CUmemGenericAllocationHandle next_handle = 1;
#define MAX_MAPPINGS 8192
static struct { CUdeviceptr ptr; size_t size; int handle_index; } mappings[MAX_MAPPINGS];
/* One past the highest slot of each table ever taken: where looks end. */
static int handles_used, mappings_used;

/* With the lock held: frees a handle's memory once nothing holds it. */
static void free_if_unused(int i) {
    if (!handles[i].released || handles[i].mappings > 0) return;
    if (handles[i].device >= 0) used[handles[i].device] -= handles[i].size;
    close(handles[i].fd);
    handles[i].handle = 0;
}

#include "costs.h"

/* FAKE_CUDA_NO_HOST_VMM=1: a driver that makes physical memory on devices
 * only, as drivers before CUDA 12.2 do. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
    if (no_device()) return NO_DEVICE;
    if (!handle || !prop) return INVALID_VALUE;
    int on_device = prop->location.type == 1, dev = prop->location.id;
    CUresult rc = OK;
    if (!on_device && env_size("FAKE_CUDA_NO_HOST_VMM", 0)) rc = INVALID_VALUE;
    /* As the H200's driver answered PyTorch: host memory is not made
     * GPUDirect RDMA capable (allocFlags.gpuDirectRDMACapable). */
    if (!on_device && prop->flags[1]) rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (on_device && (size > capacity() || used[dev] > capacity() - size)) rc = MEMORY_ALLOCATION;
    int i = 0;
    while (rc == OK && i < MAX_HANDLES && handles[i].handle) i++;
    if (rc == OK && i == MAX_HANDLES) rc = MEMORY_ALLOCATION;
    int fd = rc == OK ? memfd_create("fake-cuda-handle", MFD_CLOEXEC) : -1;
    if (rc == OK && (fd < 0 || ftruncate(fd, (off_t)size))) rc = MEMORY_ALLOCATION;
    if (rc != OK && fd >= 0) close(fd);
    if (rc == OK) {
        handles[i].fd = fd;
        if (i >= handles_used) handles_used = i + 1;
        handles[i].handle = next_handle++;
        handles[i].size = size;
        handles[i].device = on_device ? dev : -1;
        handles[i].mappings = 0;
        handles[i].released = 0;
        if (on_device) used[dev] += size;
        *handle = handles[i].handle;
    }
    pthread_mutex_unlock(&lock);
    if (rc == OK && !on_device) pin_cost(size, 1);
    if (rc == OK && on_device) call_cost();
    const char *where = on_device ? "device" : prop->location.type == 3 ? "host_numa" : "host";
    trace("cuMemCreate size=%zu location=%s id=%d rdma=%d rc=%d handle=%llu", size, where, prop->location.id, prop->flags[1], rc, rc ? 0ULL : *handle);
    return rc;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUresult rc = INVALID_VALUE;
    size_t host_bytes = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < handles_used; i++)
        if (handle && handles[i].handle == handle && !handles[i].released) {
            handles[i].released = 1;
            host_bytes = handles[i].device < 0 ? handles[i].size : 0;
            free_if_unused(i);
            rc = OK;
        }
    pthread_mutex_unlock(&lock);
    pin_cost(host_bytes, 0);
    if (rc == OK) call_cost();
    trace("cuMemRelease handle=%llu rc=%d", handle, rc);
    return rc;
}
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    if (!ptr || !size) return INVALID_VALUE;
    size = (size + 0xfffff) & ~(size_t)0xfffff;
    void *at = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) return MEMORY_ALLOCATION;
    *ptr = (CUdeviceptr)at;
    return OK;
}
/* Refused while memory is still mapped inside the range, as the driver
 * refuses it; logged with its answer. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    if (!ptr || !size) return INVALID_VALUE;
    size = (size + 0xfffff) & ~(size_t)0xfffff;
    CUresult rc = OK;
    pthread_mutex_lock(&lock);
    for (int m = 0; m < mappings_used; m++)
        if (mappings[m].ptr && mappings[m].ptr >= ptr && mappings[m].ptr < ptr + size) rc = INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    if (rc == OK && munmap((void *)ptr, size)) rc = INVALID_VALUE;
    trace("cuMemAddressFree ptr=%#llx size=%zu rc=%d", ptr, size, rc);
    return rc;
}
/* A handle maps whole: the driver refuses an offset into it and a size
 * below its own ("operation not supported", device and host memory alike,
 * on the H100's driver 580). */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
    CUresult rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < handles_used; i++) {
        if (!handle || handles[i].handle != handle || handles[i].released) continue;
        if (offset != 0 || size != handles[i].size) {
            rc = offset + size <= handles[i].size ? NOT_SUPPORTED : INVALID_VALUE;
            break;
        }
        for (int m = 0; m < MAX_MAPPINGS; m++)
            if (!mappings[m].ptr) {
                void *at = mmap((void *)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, handles[i].fd, (off_t)offset);
                if (at == MAP_FAILED) break;
                if (m >= mappings_used) mappings_used = m + 1;
                mappings[m].ptr = ptr;
                mappings[m].size = size;
                mappings[m].handle_index = i;
                handles[i].mappings++;
                rc = OK;
                break;
            }
        break;
    }
    pthread_mutex_unlock(&lock);
    if (rc == OK) remap_cost(size);
    trace("cuMemMap ptr=%#llx size=%zu handle=%llu rc=%d", ptr, size, handle, rc);
    return rc;
}
/* Access is always granted here: mappings are readable and writable. It
 * takes the time costs.h gives it. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
    trace("cuMemSetAccess ptr=%#llx size=%zu", ptr, size);
    int host = 0;
    pthread_mutex_lock(&lock);
    for (int m = 0; m < mappings_used; m++)
        if (mappings[m].ptr && mappings[m].ptr >= ptr && mappings[m].ptr < ptr + size)
            host |= handles[mappings[m].handle_index].device < 0;
    pthread_mutex_unlock(&lock);
    access_cost(host, size);
    return desc && count ? OK : INVALID_VALUE;
}
#include "driver_copies.h"

/* Unmaps every mapping inside [ptr, ptr + size). A copy queued or running
 * on the range ends the program, saying so (a GPU's would fault). */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    no_copies_on(ptr, size);
    CUresult rc = INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (int m = 0; m < mappings_used; m++)
        if (mappings[m].ptr && mappings[m].ptr >= ptr && mappings[m].ptr + mappings[m].size <= ptr + size) {
            int i = mappings[m].handle_index;
            /* Back to reserved, inaccessible address space. */
            mmap((void *)mappings[m].ptr, mappings[m].size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            mappings[m].ptr = 0;
            handles[i].mappings--;
            free_if_unused(i);
            rc = OK;
        }
    pthread_mutex_unlock(&lock);
    if (rc == OK) {
        call_cost();
        remap_cost(size);
    }
    /* Kernels of the fake runtime's that may still touch the range: on a
     * GPU they would fault, or read what was mapped next. */
    static int (*kernels_using)(unsigned long long, unsigned long long);
    if (!kernels_using) kernels_using = (int (*)(unsigned long long, unsigned long long))dlsym(RTLD_DEFAULT, "cudaFakeKernelsUsing");
    int busy = kernels_using ? kernels_using(ptr, ptr + size) : 0;
    trace("cuMemUnmap ptr=%#llx size=%zu rc=%d busy=%d", ptr, size, rc, busy);
    return rc;
}

#include "driver_graphs.h"

/* Copies and memsets of the driver, made at once (its streams do not run
 * work apart from the host's here), except on the runtime's streams
 * (driver_copies.h). */
/* Logged when called; FAKE_CUDA_MOVE_DELAY_MS holds the caller first, as a
 * large copy over the link does. */
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    trace("cuMemcpyAsync dst=%#llx src=%#llx size=%zu", dst, src, n);
    move_delay();
    if (on_runtime_streams()) return runtime.copy((void *)dst, (const void *)src, n, s);
    if (env_size("FAKE_CUDA_DEFER_COPIES", 0)) {
        pthread_mutex_lock(&lock);
        int queued = deferred_queued - deferred_landed < MAX_DEFERRED;
        if (queued) deferred[deferred_queued++ % MAX_DEFERRED] = (typeof(deferred[0])){(void *)dst, (const void *)src, n, s, 0};
        pthread_mutex_unlock(&lock);
        if (queued) return OK;
        land_copies();
    }
    memcpy((void *)dst, (void *)src, n);
    return OK;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    if (on_runtime_streams()) return runtime.copy((void *)dst, src, n, s);
    memcpy((void *)dst, src, n);
    return OK;
}
/* A copy of rows described by a CUDA_MEMCPY2D (host or device ends, which
 * are both plain memory here); the copies held back land first. */
struct fake_memcpy2d {
    size_t src_x, src_y; int src_type; const void *src_host; CUdeviceptr src_device; void *src_array; size_t src_pitch;
    size_t dst_x, dst_y; int dst_type; void *dst_host; CUdeviceptr dst_device; void *dst_array; size_t dst_pitch;
    size_t width, height;
};
CUresult cuMemcpy2D_v2(const struct fake_memcpy2d *c) {
    if (!c) return INVALID_VALUE;
    land_copies();
    trace("cuMemcpy2D_v2 dst=%#llx width=%zu height=%zu", c->dst_device, c->width, c->height);
    const char *src = c->src_type == 1 ? c->src_host : (const char *)c->src_device;
    char *dst = c->dst_type == 1 ? c->dst_host : (char *)c->dst_device;
    for (size_t row = 0; row < c->height; row++)
        memcpy(dst + (c->dst_y + row) * c->dst_pitch + c->dst_x, src + (c->src_y + row) * c->src_pitch + c->src_x, c->width);
    return OK;
}
/* The synchronous forms: the copies held back land first. */
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { land_copies(); trace("cuMemcpyHtoD_v2 dst=%#llx size=%zu", dst, n); memcpy((void *)dst, src, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { land_copies(); memcpy(dst, (void *)src, n); return OK; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { land_copies(); memcpy((void *)dst, (void *)src, n); return OK; }
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoD_v2(dst, src, n); }
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) { land_copies(); memset((void *)dst, value, n); return OK; }
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t n) {
    land_copies();
    for (size_t i = 0; i < n; i++) ((unsigned *)dst)[i] = value;
    return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    if (on_runtime_streams()) return runtime.copy(dst, (const void *)src, n, s);
    memcpy(dst, (void *)src, n);
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    if (on_runtime_streams()) return runtime.copy((void *)dst, (const void *)src, n, s);
    memcpy((void *)dst, (void *)src, n);
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
    if (on_runtime_streams()) return runtime.set((void *)dst, value, n, s);
    memset((void *)dst, value, n);
    return OK;
}
/* On the runtime's streams, made once the stream's work before it has run. */
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, CUstream s) {
    if (on_runtime_streams()) runtime.stream_sync(s);
    for (size_t i = 0; i < n; i++) ((unsigned *)dst)[i] = value;
    return OK;
}
#include "per_thread.h"

/* Modules come and go; their functions' addresses are reused. */
CUresult cuModuleUnload(void *module) { trace("cuModuleUnload module=%p", module); return OK; }
CUresult cuLibraryUnload(void *library) { trace("cuLibraryUnload library=%p", library); return OK; }

/* Parameter metadata of fake functions (see memory.h). */
void cuFakeSetParams(const void *function, int count, const size_t *sizes) { set_params(function, count, sizes); }
CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) { return param_info(f, index, offset, size); }
CUresult cuKernelGetParamInfo(void *k, size_t index, size_t *offset, size_t *size) { return param_info(k, index, offset, size); }

/* Kernel launches: logged with the path they came by, nothing else. */
#define CU_LAUNCH(name, ...)                                                                   \
    CUresult name(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,     \
                  unsigned bz, unsigned shared, CUstream stream, void **params __VA_ARGS__) {   \
        if (no_device()) return NO_DEVICE;                                                      \
        trace(#name " function=%p grid=%u block=%u", f, gx, bx);                                \
        return OK;                                                                              \
    }
CU_LAUNCH(cuLaunchKernel, , void **extra)
CU_LAUNCH(cuLaunchKernel_ptsz, , void **extra)
CU_LAUNCH(cuLaunchCooperativeKernel)
CU_LAUNCH(cuLaunchCooperativeKernel_ptsz)
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    trace("cuLaunchKernelEx function=%p", f);
    return no_device() ? NO_DEVICE : OK;
}
CUresult cuLaunchKernelEx_ptsz(const void *config, void *f, void **params, void **extra) {
    trace("cuLaunchKernelEx_ptsz function=%p", f);
    return no_device() ? NO_DEVICE : OK;
}
CUresult cuGraphLaunch(void *graph, CUstream stream) {
    trace("cuGraphLaunch graph=%p", graph);
    return no_device() ? NO_DEVICE : OK;
}
CUresult cuGraphLaunch_ptsz(void *graph, CUstream stream) {
    trace("cuGraphLaunch_ptsz graph=%p", graph);
    return no_device() ? NO_DEVICE : OK;
}

/* What a lookup may hand out instead of the exported functions: a driver's
 * table of its own, or another interposer's functions in front of it, at
 * addresses no exported symbol has (FAKE_CUDA_PRIVATE_LOOKUP=1). */
static CUresult private_alloc(CUdeviceptr *p, size_t size) {
    CUresult rc = fake_alloc((void **)p, size, 0);
    trace("cuMemAlloc_v2 size=%zu device=%d rc=%d ptr=%p private=1", size, current_device, rc, rc ? NULL : (void *)*p);
    return rc;
}
static CUresult private_free(CUdeviceptr p) {
    CUresult rc = fake_free((void *)p);
    trace("cuMemFree_v2 ptr=%p rc=%d private=1", (void *)p, rc);
    return rc;
}
static CUresult private_info(size_t *free_bytes, size_t *total) {
    return fake_mem_info("cuMemGetInfo_v2", free_bytes, total);
}

/* The driver's lookup by name, as the real one: the base name and the CUDA
 * version pick the function (here always the _v2 forms), and the per-thread
 * default stream flag picks the _ptsz forms. */
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    void *found = NULL;
    /* As the driver answers for a function newer than the version asked:
     * success, no function, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT. */
    if (!strcmp(symbol, "cuLaunchKernelEx") && version < 11060) {
        *pfn = NULL;
        if (status) *status = 2;
        trace("cuGetProcAddress symbol=%s version=%d flags=%llu found=no", symbol, version, flags);
        return OK;
    }
    const char *private_table = getenv("FAKE_CUDA_PRIVATE_LOOKUP");
    int private = private_table && !strcmp(private_table, "1");
    if (private && !strcmp(symbol, "cuMemAlloc")) found = (void *)private_alloc;
    else if (private && !strcmp(symbol, "cuMemFree")) found = (void *)private_free;
    else if (private && !strcmp(symbol, "cuMemGetInfo")) found = (void *)private_info;
    else if (!strcmp(symbol, "cuMemAlloc")) found = (void *)cuMemAlloc_v2;
    else if (!strcmp(symbol, "cuMemFree")) found = (void *)cuMemFree_v2;
    else if (!strcmp(symbol, "cuMemGetInfo")) found = (void *)cuMemGetInfo_v2;
    else if (!strcmp(symbol, "cuMemAllocManaged")) found = (void *)cuMemAllocManaged;
    else if (!strcmp(symbol, "cuMemAllocAsync")) found = ptsz ? (void *)cuMemAllocAsync_ptsz : (void *)cuMemAllocAsync;
    else if (!strcmp(symbol, "cuMemFreeAsync")) found = ptsz ? (void *)cuMemFreeAsync_ptsz : (void *)cuMemFreeAsync;
    else if (!strcmp(symbol, "cuMemcpyHtoDAsync")) found = ptsz ? (void *)cuMemcpyHtoDAsync_v2_ptsz : (void *)cuMemcpyHtoDAsync_v2;
    else if (!strcmp(symbol, "cuMemsetD8Async")) found = ptsz ? (void *)cuMemsetD8Async_ptsz : (void *)cuMemsetD8Async;
    else if (!strcmp(symbol, "cuMemcpyHtoD")) found = ptsz ? (void *)cuMemcpyHtoD_v2_ptds : (void *)cuMemcpyHtoD_v2;
    else if (!strcmp(symbol, "cuInit")) found = (void *)cuInit;
    else if (!strcmp(symbol, "cuMemCreate")) found = (void *)cuMemCreate;
    else if (!strcmp(symbol, "cuMemRelease")) found = (void *)cuMemRelease;
    else if (!strcmp(symbol, "cuMemMap")) found = (void *)cuMemMap;
    else if (!strcmp(symbol, "cuMemUnmap")) found = (void *)cuMemUnmap;
    else if (!strcmp(symbol, "cuLaunchKernel")) found = ptsz ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
    else if (!strcmp(symbol, "cuLaunchKernelEx")) found = ptsz ? (void *)cuLaunchKernelEx_ptsz : (void *)cuLaunchKernelEx;
    else if (!strcmp(symbol, "cuStreamBeginCapture") && version >= 10010) found = ptsz ? (void *)cuStreamBeginCapture_v2_ptsz : (void *)cuStreamBeginCapture_v2;
    trace("cuGetProcAddress symbol=%s version=%d flags=%llu found=%s", symbol, version, flags, found ? "yes" : "no");
    if (status) *status = found ? 0 : 1;
    *pfn = found;
    return found ? OK : 500; /* CUDA_ERROR_NOT_FOUND */
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
