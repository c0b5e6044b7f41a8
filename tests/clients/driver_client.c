/*
 * A program that allocates through the CUDA driver API (linked against
 * libcuda.so.1), and through the runtime too, driven by its arguments:
 *   malloc:NAME:SIZE  managed:NAME:SIZE  async:NAME:SIZE  pool:NAME:SIZE
 *   pitch:NAME:WIDTH:HEIGHT  free:NAME  freeasync:NAME  meminfo  touch:NAME
 *   rtmalloc:NAME:SIZE (cudaMalloc)  maps (whether a CUDA runtime is loaded)
 * Built with -DDRIVER_ONLY it links the driver alone (no rtmalloc, no entry points).
 *   create:NAME:SIZE[:host|:rdma] (cuMemCreate on device 0, or on the host,
 *   or on device 0 asking for GPUDirect RDMA as PyTorch does)  release:NAME
 *   reserve:NAME:SIZE (address space)  map:NAME:HANDLE (all of HANDLE, at
 *   the start of reserved NAME)  unmap:NAME:SIZE  meminfo
 *   fetch:HOW (proc, proc_v2, entry, entry_version), then fmalloc:NAME:SIZE,
 *   ffree:NAME, fmeminfo through the fetched cuMemAlloc, cuMemFree, cuMemGetInfo
 *   kernel:HOW:SRC:DST:EXTRA (a launch of a function with a parameter layout,
 *   by HOW as launch, or extra: cuLaunchKernel with a packed buffer)
 *   opaque:HOW:NAME (a launch of a function without layout, naming NAME)
 *   capture:HOW (begin capturing stream 0x61; HOW: link, or fetched by
 *   cuGetProcAddress)  endcapture  instantiate[:params] (with flags, or with
 *   parameters)  replay (cuGraphLaunch)  destroy
 *   nodes:SRC:DST:CHILD (a graph built node by node: a kernel node naming SRC
 *   and DST, and a child graph whose kernel node names CHILD; "-" for none)
 *   dcopy:SRC:DST (cuMemcpyDtoDAsync_v2)  hcopy:DST (cuMemcpyHtoDAsync_v2 of
 *   host bytes)  dset:NAME (cuMemsetD8Async)  poolstats (the default pool's used
 *   bytes and their high-water mark)  hcopysync:DST, dsetsync:NAME (the
 *   same by cuMemcpyHtoD_v2 and cuMemsetD8_v2)  copy2d:DST:BYTE (cuMemcpy2D_v2 of host
 *   bytes BYTE into DST, as two rows of half its size)
 *   poke:NAME:BYTE (the host writes BYTE at NAME)  peek:NAME (and reads it)
 *   addnode:NAME (one more kernel node in that graph, naming NAME)
 *   graphdestroy (cuGraphDestroy)
 *   unload (cuModuleUnload)  redescribe (kernel's function, now of one
 *   8-byte parameter: another function at the same address)
 *   launch:HOW (one kernel launch: cu, cu_ptsz, ex, ex_ptsz, coop, coop_ptsz,
 *   graph, graph_ptsz, and fetched: cuLaunchKernelEx fetched with fetch:HOW)
 *   perthread:NAME (per-thread default stream copies and a memset into NAME)
 *   probe:SYMBOL:VERSION (cuGetProcAddress_v2 at that CUDA version: found or not)
 * SIZE is bytes, or with K, M or G (binary). Each step prints one line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned flags);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, void *stream);
CUresult cuDeviceGetDefaultMemPool(void **pool, int device);
CUresult cuMemPoolGetAttribute(void *pool, int attribute, void *value);
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned element);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t size, void *pool, void *stream);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
#ifndef DRIVER_ONLY
int cudaMalloc(void **p, size_t size);
int cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags, int *status);
int cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned version, unsigned long long flags, int *status);
#endif
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status);

typedef struct { int type; int requestedHandleTypes; struct { int type; int id; } location; void *win32; unsigned char flags[8]; } CUmemAllocationProp;
CUresult cuMemCreate(unsigned long long *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(unsigned long long handle);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, void *stream, void **params, void **extra);
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const void *config, void *f, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, void *stream, void **params);
CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, void *stream, void **params);
CUresult cuGraphLaunch(void *graph, void *stream);
CUresult cuGraphLaunch_ptsz(void *graph, void *stream);

/* cuMemAlloc, cuMemFree and cuMemGetInfo as fetched by name (fetch:HOW). */
static CUresult (*fetched_alloc)(CUdeviceptr *, size_t);
static CUresult (*fetched_free)(CUdeviceptr);
static CUresult (*fetched_info)(size_t *, size_t *);
static CUresult (*fetched_launch)(const void *, void *, void **, void **);

static void *fetch(const char *how, const char *symbol) {
    void *f = NULL;
    int status = 0;
    if (!strcmp(how, "proc")) cuGetProcAddress(symbol, &f, 13000, 0);
    else if (!strcmp(how, "proc_v2")) cuGetProcAddress_v2(symbol, &f, 13000, 0, &status);
#ifndef DRIVER_ONLY
    else if (!strcmp(how, "entry")) cudaGetDriverEntryPoint(symbol, &f, 0, &status);
    else cudaGetDriverEntryPointByVersion(symbol, &f, 13000, 0, &status);
#endif
    return f;
}

#define MAX_NAMES 64
static struct { char name[32]; CUdeviceptr ptr; size_t size; } names[MAX_NAMES];

void cuFakeSetParams(const void *function, int count, const size_t *sizes);
CUresult cuModuleUnload(void *module);
CUresult cuGraphCreate(void **graph, unsigned flags);
CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void **deps, size_t ndeps, const void *params);
CUresult cuGraphAddChildGraphNode(void **node, void *graph, void **deps, size_t ndeps, void *child);
CUresult cuGraphDestroy(void *graph);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream);
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void *stream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, void *stream);
/* CUDA_MEMCPY2D, as cuda.h lays it out. */
struct memcpy2d {
    size_t src_x, src_y; int src_type; const void *src_host; CUdeviceptr src_device; void *src_array; size_t src_pitch;
    size_t dst_x, dst_y; int dst_type; void *dst_host; CUdeviceptr dst_device; void *dst_array; size_t dst_pitch;
    size_t width, height;
};
CUresult cuMemcpy2D_v2_ptds(const struct memcpy2d *copy);
CUresult cuMemcpy2D_v2(const struct memcpy2d *copy);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);
CUresult cuStreamBeginCapture_v2(void *stream, int mode);
CUresult cuStreamEndCapture(void *stream, void **graph);
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
CUresult cuGraphInstantiateWithParams(void **exec, void *graph, void *params);
CUresult cuGraphExecDestroy(void *exec);
static void *graph, *graph_exec;

/* The function of the kernel steps, and whether it was described yet. */
static char kernel_function;
static int described;

/* The kernel steps' function: an int, a struct holding two pointers at
 * offsets 8 and 24, and a pointer. */
struct kernel_pair { int tag, pad; CUdeviceptr src; int x, y; CUdeviceptr dst; };
static void describe_kernel(void) {
    if (described) return;
    size_t sizes[3] = {4, sizeof(struct kernel_pair), 8};
    cuFakeSetParams(&kernel_function, 3, sizes);
    described = 1;
}

/* One launch of `f` by `how` on `stream`; -1 for an unknown how. `packed`
 * (`size` bytes) is the same arguments as one buffer, for extra. */
static CUresult launch_by(const char *how, void *f, void **params, void *packed, size_t size, void *stream) {
    struct { unsigned grid[3], block[3], shared; void *stream; void *attrs; unsigned count; } config = {
        {4, 1, 1}, {128, 1, 1}, 0, stream, NULL, 0};
    void *extra[] = {(void *)1, packed, (void *)2, &size, (void *)0};
    if (!strcmp(how, "cu")) return cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    if (!strcmp(how, "cu_ptsz")) return cuLaunchKernel_ptsz(f, 4, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    if (!strcmp(how, "extra")) return cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, stream, NULL, extra);
    if (!strcmp(how, "ex")) return cuLaunchKernelEx(&config, f, params, NULL);
    if (!strcmp(how, "ex_ptsz")) return cuLaunchKernelEx_ptsz(&config, f, params, NULL);
    if (!strcmp(how, "coop")) return cuLaunchCooperativeKernel(f, 4, 1, 1, 128, 1, 1, 0, stream, params);
    if (!strcmp(how, "coop_ptsz")) return cuLaunchCooperativeKernel_ptsz(f, 4, 1, 1, 128, 1, 1, 0, stream, params);
    if (!strcmp(how, "fetched") && fetched_launch) return fetched_launch(&config, f, params, NULL);
    return -1;
}

static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    return *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : *end == 'G' ? v << 30 : v;
}

static int slot(const char *name) {
    for (int i = 0; i < MAX_NAMES; i++)
        if (!strcmp(names[i].name, name)) return i;
    for (int i = 0; i < MAX_NAMES; i++)
        if (!names[i].name[0]) { snprintf(names[i].name, sizeof names[i].name, "%s", name); return i; }
    exit(3);
}

/* The address of NAME, or 0 for "-". */
static CUdeviceptr named_or_zero(const char *name) { return strcmp(name, "-") ? names[slot(name)].ptr : 0; }

/* A kernel node of the kernel steps' function in `graph`, naming SRC and
 * DST in its struct and EXTRA as its last argument. The arguments live
 * here only: the driver keeps its own copy. */
static CUresult add_kernel_node(void *graph, CUdeviceptr src, CUdeviceptr dst, CUdeviceptr extra) {
    struct { void *func; unsigned grid[3], block[3], shared; void **params, **extra; void *kern, *ctx; } node_params = {0};
    describe_kernel();
    int n = 64;
    struct kernel_pair pair = {7, 0, src, 1, 2, dst};
    void *params[3] = {&n, &pair, &extra}, *node = NULL;
    node_params.func = &kernel_function;
    node_params.params = params;
    return cuGraphAddKernelNode_v2(&node, graph, NULL, 0, &node_params);
}

int main(int argc, char **argv) {
    if (cuInit(0)) printf("cuInit failed\n");
    for (int a = 1; a < argc; a++) {
        char step[256], *fields[6] = {0};
        int n = 0;
        snprintf(step, sizeof step, "%s", argv[a]);
        for (char *tok = strtok(step, ":"); tok && n < 6; tok = strtok(NULL, ":")) fields[n++] = tok;
        const char *op = fields[0];
        CUdeviceptr p = 0;
        CUresult rc;
        if (!strcmp(op, "malloc") || !strcmp(op, "managed") || !strcmp(op, "async") || !strcmp(op, "pool") || !strcmp(op, "rtmalloc")) {
            size_t size = parse_size(fields[2]);
            if (!strcmp(op, "malloc")) rc = cuMemAlloc_v2(&p, size);
            else if (!strcmp(op, "managed")) rc = cuMemAllocManaged(&p, size, 1);
            else if (!strcmp(op, "async")) rc = cuMemAllocAsync(&p, size, 0);
            else if (!strcmp(op, "pool")) rc = cuMemAllocFromPoolAsync(&p, size, 0, 0);
#ifndef DRIVER_ONLY
            else rc = cudaMalloc((void **)&p, size);
#else
            else rc = 1;
#endif
            int i = slot(fields[1]);
            if (rc == 0) { names[i].ptr = p; names[i].size = size; }
            printf("%s %s rc=%d ptr=%#llx\n", op, fields[1], rc, rc == 0 ? p : 0ULL);
        } else if (!strcmp(op, "maps")) {
            FILE *maps = fopen("/proc/self/maps", "r");
            char line[512];
            int runtime = 0;
            while (maps && fgets(line, sizeof line, maps)) runtime |= strstr(line, "libcudart") != NULL;
            if (maps) fclose(maps);
            printf("maps runtime_loaded=%d\n", runtime);
        } else if (!strcmp(op, "create")) {
            CUmemAllocationProp prop = {0};
            prop.type = 1; /* pinned */
            prop.location.type = fields[3] && !strcmp(fields[3], "host") ? 2 : 1;
            prop.flags[1] = fields[3] && !strcmp(fields[3], "rdma"); /* gpuDirectRDMACapable */
            unsigned long long handle = 0;
            rc = cuMemCreate(&handle, parse_size(fields[2]), &prop, 0);
            if (rc == 0) { names[slot(fields[1])].ptr = handle; names[slot(fields[1])].size = parse_size(fields[2]); }
            printf("create %s rc=%d handle=%llu\n", fields[1], rc, handle);
        } else if (!strcmp(op, "reserve")) {
            rc = cuMemAddressReserve(&p, parse_size(fields[2]), 0, 0, 0);
            if (rc == 0) names[slot(fields[1])].ptr = p;
            printf("reserve %s rc=%d ptr=%#llx\n", fields[1], rc, rc == 0 ? p : 0ULL);
        } else if (!strcmp(op, "map")) {
            int h = slot(fields[2]);
            rc = cuMemMap(names[slot(fields[1])].ptr, names[h].size, 0, names[h].ptr, 0);
            printf("map %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "unmap")) {
            rc = cuMemUnmap(names[slot(fields[1])].ptr, parse_size(fields[2]));
            printf("unmap %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "release")) {
            rc = cuMemRelease(names[slot(fields[1])].ptr);
            printf("release %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "launch")) {
            static char function;
            const char *how = fields[1];
            void *params[1] = {NULL};
            if (!strcmp(how, "cu")) rc = cuLaunchKernel(&function, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
            else if (!strcmp(how, "cu_ptsz")) rc = cuLaunchKernel_ptsz(&function, 4, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
            else if (!strcmp(how, "ex")) rc = cuLaunchKernelEx(NULL, &function, params, NULL);
            else if (!strcmp(how, "ex_ptsz")) rc = cuLaunchKernelEx_ptsz(NULL, &function, params, NULL);
            else if (!strcmp(how, "coop")) rc = cuLaunchCooperativeKernel(&function, 4, 1, 1, 128, 1, 1, 0, NULL, params);
            else if (!strcmp(how, "coop_ptsz")) rc = cuLaunchCooperativeKernel_ptsz(&function, 4, 1, 1, 128, 1, 1, 0, NULL, params);
            else if (!strcmp(how, "graph")) rc = cuGraphLaunch(&function, NULL);
            else if (!strcmp(how, "graph_ptsz")) rc = cuGraphLaunch_ptsz(&function, NULL);
            else if (!strcmp(how, "fetched") && fetched_launch) rc = fetched_launch(NULL, &function, params, NULL);
            else { fprintf(stderr, "driver_client: unknown launch %s\n", how); return 3; }
            printf("launch %s rc=%d\n", how, rc);
        } else if (!strcmp(op, "kernel")) {
            /* A function with a layout: an int, a struct holding SRC and DST
             * at offsets 8 and 24, and EXTRA; "-" for none. */
            void *function = &kernel_function;
            describe_kernel();
            int n = 64;
            struct kernel_pair pair = {7, 0, 0, 1, 2, 0};
            CUdeviceptr extra_ptr = 0;
            if (strcmp(fields[2], "-")) pair.src = names[slot(fields[2])].ptr;
            if (strcmp(fields[3], "-")) pair.dst = names[slot(fields[3])].ptr;
            if (strcmp(fields[4], "-")) extra_ptr = names[slot(fields[4])].ptr;
            void *params[3] = {&n, &pair, &extra_ptr};
            unsigned char packed[48] = {0};
            memcpy(packed, &n, 4);
            memcpy(packed + 8, &pair, 32);
            memcpy(packed + 40, &extra_ptr, 8);
            rc = launch_by(fields[1], function, params, packed, sizeof packed, (void *)0x61);
            if (rc == -1) { fprintf(stderr, "driver_client: unknown launch %s\n", fields[1]); return 3; }
            printf("kernel %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "nodes")) {
            void *child = NULL, *node = NULL;
            rc = cuGraphCreate(&graph, 0) || cuGraphCreate(&child, 0);
            rc = rc || add_kernel_node(child, 0, 0, named_or_zero(fields[3]));
            rc = rc || add_kernel_node(graph, named_or_zero(fields[1]), named_or_zero(fields[2]), 0);
            rc = rc || cuGraphAddChildGraphNode(&node, graph, NULL, 0, child);
            printf("nodes rc=%d\n", rc);
        } else if (!strcmp(op, "addnode")) {
            printf("addnode rc=%d\n", add_kernel_node(graph, names[slot(fields[1])].ptr, 0, 0));
        } else if (!strcmp(op, "graphdestroy")) {
            printf("graphdestroy rc=%d\n", cuGraphDestroy(graph));
        } else if (!strcmp(op, "capture")) {
            CUresult (*begin)(void *, int) = cuStreamBeginCapture_v2;
            if (!strcmp(fields[1], "fetched")) cuGetProcAddress("cuStreamBeginCapture", (void **)&begin, 13000, 0);
            printf("capture rc=%d\n", begin((void *)0x61, 0));
        } else if (!strcmp(op, "endcapture")) {
            printf("endcapture rc=%d\n", cuStreamEndCapture((void *)0x61, &graph));
        } else if (!strcmp(op, "instantiate")) {
            /* CUDA_GRAPH_INSTANTIATE_PARAMS: flags, upload stream, error node, result. */
            struct { unsigned long long flags; void *upload, *node; int result; } params = {0};
            rc = fields[1] ? cuGraphInstantiateWithParams(&graph_exec, graph, &params)
                           : cuGraphInstantiateWithFlags(&graph_exec, graph, 0);
            printf("instantiate rc=%d\n", rc);
        } else if (!strcmp(op, "replay")) {
            printf("replay rc=%d\n", cuGraphLaunch(graph_exec, (void *)0x61));
        } else if (!strcmp(op, "destroy")) {
            printf("destroy rc=%d\n", cuGraphExecDestroy(graph_exec));
        } else if (!strcmp(op, "unload")) {
            printf("unload rc=%d\n", cuModuleUnload(NULL));
        } else if (!strcmp(op, "redescribe")) {
            size_t sizes[1] = {8};
            cuFakeSetParams(&kernel_function, 1, sizes);
            described = 1;
            printf("redescribe rc=0\n");
        } else if (!strcmp(op, "opaque")) {
            static char opaque;
            CUdeviceptr target = names[slot(fields[2])].ptr;
            void *params[1] = {&target};
            rc = launch_by(fields[1], &opaque, params, &target, sizeof target, NULL);
            printf("opaque %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "probe")) {
            void *f = NULL;
            int status = -1;
            rc = cuGetProcAddress_v2(fields[1], &f, atoi(fields[2]), 0, &status);
            printf("probe %s rc=%d found=%d status=%d\n", fields[1], rc, f != NULL, status);
        } else if (!strcmp(op, "fetch")) {
            fetched_launch = fetch(fields[1], "cuLaunchKernelEx");
            fetched_alloc = fetch(fields[1], "cuMemAlloc");
            fetched_free = fetch(fields[1], "cuMemFree");
            fetched_info = fetch(fields[1], "cuMemGetInfo");
            printf("fetch %s ok=%d\n", fields[1], fetched_alloc && fetched_free && fetched_info);
        } else if (!strcmp(op, "fmalloc")) {
            size_t size = parse_size(fields[2]);
            rc = fetched_alloc(&p, size);
            int i = slot(fields[1]);
            if (rc == 0) { names[i].ptr = p; names[i].size = size; }
            printf("fmalloc %s rc=%d ptr=%#llx\n", fields[1], rc, rc == 0 ? p : 0ULL);
        } else if (!strcmp(op, "ffree")) {
            rc = fetched_free(names[slot(fields[1])].ptr);
            printf("ffree %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "fmeminfo")) {
            size_t free_bytes = 0, total = 0;
            rc = fetched_info(&free_bytes, &total);
            printf("meminfo rc=%d free=%zu total=%zu\n", rc, free_bytes, total);
        } else if (!strcmp(op, "pitch")) {
            size_t pitch = 0, w = parse_size(fields[2]), h = parse_size(fields[3]);
            rc = cuMemAllocPitch_v2(&p, &pitch, w, h, 4);
            int i = slot(fields[1]);
            if (rc == 0) { names[i].ptr = p; names[i].size = pitch * h; }
            printf("pitch %s rc=%d ptr=%#llx pitch=%zu\n", fields[1], rc, rc == 0 ? p : 0ULL, pitch);
        } else if (!strcmp(op, "free") || !strcmp(op, "freeasync")) {
            CUdeviceptr target = names[slot(fields[1])].ptr;
            rc = !strcmp(op, "free") ? cuMemFree_v2(target) : cuMemFreeAsync(target, 0);
            printf("%s %s rc=%d\n", op, fields[1], rc);
        } else if (!strcmp(op, "meminfo")) {
            size_t free_bytes = 0, total = 0;
            rc = cuMemGetInfo_v2(&free_bytes, &total);
            printf("meminfo rc=%d free=%zu total=%zu\n", rc, free_bytes, total);
        } else if (!strcmp(op, "dcopy")) {
            int src = slot(fields[1]), dst = slot(fields[2]);
            rc = cuMemcpyDtoDAsync_v2(names[dst].ptr, names[src].ptr, names[src].size, NULL);
            printf("dcopy rc=%d\n", rc);
        } else if (!strcmp(op, "hcopy")) {
            static char host[4096];
            rc = cuMemcpyHtoDAsync_v2(names[slot(fields[1])].ptr, host, sizeof host, NULL);
            printf("hcopy rc=%d\n", rc);
        } else if (!strcmp(op, "poolstats")) {
            void *pool = NULL;
            unsigned long long used = 0, high = 0;
            rc = cuDeviceGetDefaultMemPool(&pool, 0);
            if (rc == 0) rc = cuMemPoolGetAttribute(pool, 7, &used);
            if (rc == 0) rc = cuMemPoolGetAttribute(pool, 8, &high);
            printf("poolstats rc=%d used=%llu used_high=%llu\n", rc, used, high);
        } else if (!strcmp(op, "copy2d")) {
            int i = slot(fields[1]);
            size_t row = names[i].size / 2;
            char *host = malloc(names[i].size);
            memset(host, atoi(fields[2]), names[i].size);
            struct memcpy2d copy = {0};
            copy.src_type = 1; /* CU_MEMORYTYPE_HOST */
            copy.src_host = host;
            copy.src_pitch = row;
            copy.dst_type = 2; /* CU_MEMORYTYPE_DEVICE */
            copy.dst_device = names[i].ptr;
            copy.dst_pitch = row;
            copy.width = row;
            copy.height = 2;
            rc = cuMemcpy2D_v2(&copy);
            free(host);
            printf("copy2d %s rc=%d\n", fields[1], rc);
        } else if (!strcmp(op, "perthread")) {
            /* Per-thread default stream forms: one called by its name, two
             * looked up with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. */
            static char host[4096];
            CUresult (*set)(CUdeviceptr, unsigned char, size_t, void *) = NULL;
            CUresult (*copy)(CUdeviceptr, const void *, size_t) = NULL;
            int i = slot(fields[1]);
            rc = cuMemcpyHtoDAsync_v2_ptsz(names[i].ptr, host, sizeof host, NULL);
            if (rc == 0) rc = cuGetProcAddress("cuMemsetD8Async", (void **)&set, 13000, 2);
            if (rc == 0) rc = set(names[i].ptr, 5, names[i].size, NULL);
            if (rc == 0) rc = cuGetProcAddress("cuMemcpyHtoD", (void **)&copy, 13000, 2);
            if (rc == 0) rc = copy(names[i].ptr, host, sizeof host);
            struct memcpy2d rows = {0};
            rows.src_type = 1; /* CU_MEMORYTYPE_HOST */
            rows.src_host = host;
            rows.src_pitch = 2048;
            rows.dst_type = 2; /* CU_MEMORYTYPE_DEVICE */
            rows.dst_device = names[i].ptr;
            rows.dst_pitch = 2048;
            rows.width = 2048;
            rows.height = 2;
            if (rc == 0) rc = cuMemcpy2D_v2_ptds(&rows);
            printf("perthread rc=%d\n", rc);
        } else if (!strcmp(op, "hcopysync")) {
            static char host[4096];
            rc = cuMemcpyHtoD_v2(names[slot(fields[1])].ptr, host, sizeof host);
            printf("hcopysync rc=%d\n", rc);
        } else if (!strcmp(op, "dsetsync")) {
            int i = slot(fields[1]);
            rc = cuMemsetD8_v2(names[i].ptr, 5, names[i].size);
            printf("dsetsync rc=%d\n", rc);
        } else if (!strcmp(op, "dset")) {
            int i = slot(fields[1]);
            rc = cuMemsetD8Async(names[i].ptr, 5, names[i].size, NULL);
            printf("dset rc=%d\n", rc);
        } else if (!strcmp(op, "poke")) {
            *(unsigned char *)names[slot(fields[1])].ptr = (unsigned char)atoi(fields[2]);
            printf("poke %s ok\n", fields[1]);
        } else if (!strcmp(op, "peek")) {
            printf("peek %s byte=%d\n", fields[1], *(unsigned char *)names[slot(fields[1])].ptr);
        } else if (!strcmp(op, "touch")) {
            int i = slot(fields[1]);
            char *c = (char *)names[i].ptr;
            c[0] = 1;
            c[names[i].size - 1] = 2;
            printf("touch %s ok\n", fields[1]);
        } else {
            fprintf(stderr, "driver_client: unknown step %s\n", op);
            return 3;
        }
        fflush(stdout);
    }
    return 0;
}
