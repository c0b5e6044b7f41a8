/*
 * A CUDA program driven by its arguments, one step each, for the tests:
 *   malloc:NAME:SIZE  managed:NAME:SIZE  async:NAME:SIZE[:S]  async_ptsz:NAME:SIZE
 *   pool:NAME:SIZE  pool_ptsz:NAME:SIZE  pitch:NAME:WIDTH:HEIGHT  m3d:NAME:W:H:D
 *   free:NAME  freeasync:NAME[:S]  freeasync_ptsz:NAME  (NAME may be a 0x address;
 *   S a stream as for fill, 0 when left out)
 *   meminfo  device:N  touch:NAME (write its first and last byte)  fork  sleep:MS
 *   forkrest (a child runs the steps after it; the parent waits for it and ends)
 *   atexit_free:NAME (at exit, cudaFree NAME; registered now, so best first)
 *   launch:HOW (one kernel launch: rt, rt_ptsz, stub, stub_ptsz, exc, exc_ptsz,
 *   coop, coop_ptsz, graph, graph_ptsz)
 *   kernel:HOW:SRC:DST:EXTRA (a launch by HOW of a kernel with a parameter
 *   layout: an int, a struct holding SRC and DST at offsets 8 and 24, and a
 *   pointer EXTRA; "-" for none; on stream 0x51)
 *   opaque:HOW:NAME (a launch of a kernel without layout, its one argument NAME)
 *   matmul:A:B:D (cuBLASLt's cublasLtMatmul, on stream 0x52)
 *   gemm:A:B:C:M:N:S (cuBLAS's cublasGemmEx of M rows by N columns, with a
 *   handle set to stream S, numbered as for fill, or left unset with S of "-"; it sets C's first M * N
 *   bytes to A's first byte plus B's, through the handle's workspace when
 *   one is set)  workspace:NAME (cublasSetWorkspace_v2 of NAME on that handle)
 *   blasunseen:S (that handle's stream set to S without cuBLAS's call)
 *   conv:X:W:Y:WS (cuDNN's cudnnBackendExecute of a variant pack of X, W, Y and
 *   workspace WS; cuDNN is loaded with dlopen, as PyTorch's may be)
 *   bn:X:Y:SCALE (cuDNN's cudnnBatchNormalizationForwardTrainingEx)
 *   capture[:S] (begin capturing stream 0x51, or S numbered as for fill)
 *   endcapture[:S] (its graph)  instantiate[:params] (an executable graph of
 *   it, made with flags or with parameters)
 *   replay[:S] (launch it, on 0x51 or S)  destroy  graphdestroy (the graph)
 *   lasterror (the runtime's cudaGetLastError)  step (vramshare_step, if loaded;
 *   it prints when, in microseconds of CLOCK_MONOTONIC)
 *   repeat:N:K (the K steps after this one, N times over)  rss (resident KiB)
 *   use:NAMES:S (a kernel on S whose parameters name up to 8 blocks, NAMES
 *   joined by commas, and which does nothing with them: with the fake's cost
 *   model on, it takes a kernel's time and reads in place what is in host
 *   memory)  NAME may be #N for N below 65536, found at once
 *   fill:NAME:BYTE:S (a kernel that sets every byte of NAME to BYTE, on stream
 *   S: 0 the null stream, 1 to 3 streams of the client's; NAME+OFFSET: from
 *   that byte of NAME on, given a pointer into it)  copyout:NAME:S (an
 *   asynchronous copy of NAME to the host, on S)  record:S (an event, recorded
 *   on S)  waitevent:S (S waits for it)  sync (cudaDeviceSynchronize)
 *   hostbytes (the first and last byte copied out)  hostcount:BYTE (how many
 *   bytes copied out differ from BYTE)  memset:NAME:BYTE:S
 *   (cudaMemsetAsync of NAME on S)  peekvia:NAME:S (a kernel on S that reads
 *   the first and last byte of NAME through a pointer kept in host memory,
 *   which its parameters do not show; then cudaDeviceSynchronize)
 *   ipc:NAME (cudaIpcGetMemHandle of NAME)
 *   ptds:NAME (the per-thread default stream's cudaMemcpy_ptds, cudaMemset_ptds,
 *   cudaMemcpy2D_ptds and cudaMemset2D_ptds into NAME, in that order)
 *   copy2d:NAME:BYTE:S (cudaMemcpy2DAsync of host bytes BYTE into NAME, as two
 *   rows of half its size, on S)  memset2d:NAME:BYTE (cudaMemset2D, likewise)
 *   poolstats (the default pool's reserved and used bytes, now and their
 *   highs)  poolreset (its high-water marks reset)
 * SIZE is bytes, or with K, M or G (binary). Each step prints one line.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>

#include "cuda_api.h"

#define MAX_NAMES 1024
/* Names of the form #N (N below MAX_NUMBERED) take slot MAX_NAMES + N at
 * once, for generated programs of many blocks. */
#define MAX_NUMBERED 65536
static struct { char name[32]; void *ptr; size_t size; } names[MAX_NAMES + MAX_NUMBERED];

static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'K': return (size_t)v << 10;
    case 'M': return (size_t)v << 20;
    case 'G': return (size_t)v << 30;
    default: return (size_t)v;
    }
}

static int slot(const char *name) {
    if (name[0] == '#') {
        long n = strtol(name + 1, NULL, 10);
        if (n >= 0 && n < MAX_NUMBERED) return MAX_NAMES + (int)n;
    }
    for (int i = 0; i < MAX_NAMES; i++)
        if (!strcmp(names[i].name, name)) return i;
    for (int i = 0; i < MAX_NAMES; i++)
        if (!names[i].name[0]) { snprintf(names[i].name, sizeof names[i].name, "%s", name); return i; }
    fprintf(stderr, "client: too many names\n");
    exit(3);
}

/* NAME, NAME+OFFSET (bytes into it) or a 0x address. */
static void *lookup(const char *name) {
    if (!strncmp(name, "0x", 2)) return (void *)(size_t)strtoull(name, NULL, 16);
    const char *plus = strchr(name, '+');
    if (plus) {
        char base[32];
        snprintf(base, sizeof base, "%.*s", (int)(plus - name), name);
        return (char *)names[slot(base)].ptr + strtoull(plus + 1, NULL, 0);
    }
    return names[slot(name)].ptr;
}

static int run(char *step);

/* A step that needs the math libraries fails, saying so, in a client built
 * without them. */
#ifdef NO_CUBLASLT
#define NEEDS_CUBLAS(library)                                             \
    do {                                                                  \
        fprintf(stderr, "client: built without %s\n", library);           \
        return 3;                                                         \
    } while (0)
#define cublasLtMatmul(...) (-1)
#define cublasSetStream_v2(...) (-1)
#define cublasGemmEx(...) (-1)
#define cublasSetWorkspace_v2(...) (-1)
#else
int cublasLtMatmul(void *, void *, const void *, const void *, void *, const void *, void *, const void *,
                   const void *, void *, void *, void *, const void *, void *, size_t, void *);
int cublasSetStream_v2(void *, void *);
int cublasGemmEx(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                 const void *, void *, int, int, int, int);
int cublasSetWorkspace_v2(void *, void *, size_t);
#define NEEDS_CUBLAS(library) ((void)0)
#endif
/* The one cuBLAS handle of the gemm and workspace steps. */
static struct { cudaStream_t stream; void *workspace; } blas_handle;
/* The fake runtime's way to describe a kernel's parameters, looked up so
 * that the client also links against a real runtime (which has none). */
static void describe(const void *kernel, int count, const size_t *sizes) {
    void (*set)(const void *, int, const size_t *) =
        (void (*)(const void *, int, const size_t *))dlsym(RTLD_DEFAULT, "cudaFakeSetParams");
    if (set) set(kernel, count, sizes);
}

/* One launch of `fn` by `how`; -1 for an unknown how. */
static cudaError_t launch_by(const char *how, const void *fn, void **args, cudaStream_t stream) {
    dim3 grid = {4, 1, 1}, block = {128, 1, 1};
    struct { dim3 grid, block; size_t shared; cudaStream_t stream; void *attrs; unsigned count; } config = {
        grid, block, 0, stream, NULL, 0};
    if (!strcmp(how, "rt")) return cudaLaunchKernel(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "rt_ptsz")) return cudaLaunchKernel_ptsz(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "stub")) return __cudaLaunchKernel(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "stub_ptsz")) return __cudaLaunchKernel_ptsz(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "exc")) return cudaLaunchKernelExC(&config, fn, args);
    if (!strcmp(how, "exc_ptsz")) return cudaLaunchKernelExC_ptsz(&config, fn, args);
    if (!strcmp(how, "coop")) return cudaLaunchCooperativeKernel(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "coop_ptsz")) return cudaLaunchCooperativeKernel_ptsz(fn, grid, block, args, 0, stream);
    if (!strcmp(how, "graph")) return cudaGraphLaunch((void *)fn, stream);
    if (!strcmp(how, "graph_ptsz")) return cudaGraphLaunch_ptsz((void *)fn, stream);
    return -1;
}

static void *graph, *exec;

/* The streams of the fill and copy steps, the event, and the host copy. */
static cudaStream_t streams[4];
static void *event;
static unsigned char *copied;
static size_t copied_size;

static cudaStream_t stream_numbered(const char *s) {
    int i = atoi(s) & 3;
    if (i && !streams[i]) cudaStreamCreate(&streams[i]);
    return streams[i];
}

/* The stream of the capture steps: 0x51 (a handle the fake runtime takes
 * without queueing work on it), or one numbered as for fill. */
static cudaStream_t captured(const char *s) { return s ? stream_numbered(s) : (cudaStream_t)0x51; }

static char fill_kernel;
/* fill's body, run by the fake runtime on the kernel's stream. */
static void fill_body(void **args) {
    memset(*(void **)args[0], *(int *)args[2], *(size_t *)args[1]);
}

/* use's body: nothing; the kernel is there for its time and its
 * parameters. */
static void use_body(void **args) { (void)args; }

/* peekvia's kernel: it finds its block through host memory it is handed
 * a pointer to, as a kernel reading a table of pointers would. */
static char peek_kernel;
static unsigned char *peek_target;
static size_t peek_size;
static volatile int peek_first = -1, peek_last = -1;
static void peek_body(void **args) {
    unsigned char *block = **(unsigned char ***)args[0];
    peek_first = block[0];
    peek_last = block[peek_size - 1];
}

static void *named_or_null(const char *name) { return strcmp(name, "-") ? lookup(name) : NULL; }

/* The steps after the current one, for forkrest. */
static char **rest;
static int rest_count;
static int stop;
/* Steps after the current one that a repeat already ran. */
static int skip;

static const char *exit_free_name;
static void free_at_exit(void) {
    cudaError_t rc = cudaFree(lookup(exit_free_name));
    printf("atexit free %s rc=%d\n", exit_free_name, rc);
    fflush(stdout);
}

static void report_alloc(const char *op, const char *name, cudaError_t rc, void *p, size_t size) {
    int i = slot(name);
    if (rc == 0) { names[i].ptr = p; names[i].size = size; }
    printf("%s %s rc=%d ptr=%p\n", op, name, rc, rc == 0 ? p : NULL);
}

static int run(char *step) {
    char *fields[8] = {0};
    int n = 0;
    for (char *tok = strtok(step, ":"); tok && n < 8; tok = strtok(NULL, ":")) fields[n++] = tok;
    const char *op = fields[0];
    void *p = NULL;
    cudaError_t rc;
    if (!strcmp(op, "malloc") || !strcmp(op, "managed") || !strcmp(op, "async") ||
        !strcmp(op, "async_ptsz") || !strcmp(op, "pool") || !strcmp(op, "pool_ptsz")) {
        size_t size = parse_size(fields[2]);
        if (!strcmp(op, "malloc")) rc = cudaMalloc(&p, size);
        else if (!strcmp(op, "managed")) rc = cudaMallocManaged(&p, size, 1);
        else if (!strcmp(op, "async")) rc = cudaMallocAsync(&p, size, fields[3] ? stream_numbered(fields[3]) : 0);
        else if (!strcmp(op, "async_ptsz")) rc = cudaMallocAsync_ptsz(&p, size, 0);
        else if (!strcmp(op, "pool")) rc = cudaMallocFromPoolAsync(&p, size, 0, 0);
        else rc = cudaMallocFromPoolAsync_ptsz(&p, size, 0, 0);
        report_alloc(op, fields[1], rc, p, size);
    } else if (!strcmp(op, "pitch")) {
        size_t pitch = 0, w = parse_size(fields[2]), h = parse_size(fields[3]);
        rc = cudaMallocPitch(&p, &pitch, w, h);
        report_alloc(op, fields[1], rc, p, pitch * h);
        printf("pitched %s pitch=%zu\n", fields[1], rc == 0 ? pitch : 0);
    } else if (!strcmp(op, "m3d")) {
        struct cudaExtent e = {parse_size(fields[2]), parse_size(fields[3]), parse_size(fields[4])};
        struct cudaPitchedPtr pp = {0};
        rc = cudaMalloc3D(&pp, e);
        report_alloc(op, fields[1], rc, pp.ptr, pp.pitch * e.height * e.depth);
        printf("pitched %s pitch=%zu xsize=%zu ysize=%zu\n", fields[1], pp.pitch, pp.xsize, pp.ysize);
    } else if (!strcmp(op, "free") || !strcmp(op, "freeasync") || !strcmp(op, "freeasync_ptsz")) {
        p = lookup(fields[1]);
        cudaStream_t s = fields[2] ? stream_numbered(fields[2]) : 0;
        rc = !strcmp(op, "free") ? cudaFree(p) : !strcmp(op, "freeasync") ? cudaFreeAsync(p, s) : cudaFreeAsync_ptsz(p, 0);
        printf("%s %s rc=%d\n", op, fields[1], rc);
    } else if (!strcmp(op, "ptds")) {
        int i = slot(fields[1]);
        size_t row = names[i].size / 2;
        static char host[4096];
        rc = cudaMemcpy_ptds(names[i].ptr, host, sizeof host, 1);
        if (rc == 0) rc = cudaMemset_ptds(names[i].ptr, 4, names[i].size);
        if (rc == 0) rc = cudaMemcpy2D_ptds(names[i].ptr, row, names[i].ptr, row, 4096, 2, 3);
        if (rc == 0) rc = cudaMemset2D_ptds(names[i].ptr, row, 6, row, 2);
        printf("ptds %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "copy2d")) {
        int i = slot(fields[1]);
        size_t row = names[i].size / 2;
        static char *host;
        free(host);
        host = malloc(names[i].size);
        memset(host, atoi(fields[2]), names[i].size);
        rc = cudaMemcpy2DAsync(names[i].ptr, row, host, row, row, 2, 1, stream_numbered(fields[3]));
        printf("copy2d %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "memset2d")) {
        int i = slot(fields[1]);
        size_t row = names[i].size / 2;
        rc = cudaMemset2D(names[i].ptr, row, atoi(fields[2]), row, 2);
        printf("memset2d %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "poolstats")) {
        cudaMemPool_t pool = NULL;
        unsigned long long v[4] = {0};
        rc = cudaDeviceGetDefaultMemPool(&pool, 0);
        for (int a = 0; a < 4 && rc == 0; a++) rc = cudaMemPoolGetAttribute(pool, 5 + a, &v[a]);
        printf("poolstats rc=%d reserved=%llu reserved_high=%llu used=%llu used_high=%llu\n", rc, v[0], v[1], v[2], v[3]);
    } else if (!strcmp(op, "poolreset")) {
        cudaMemPool_t pool = NULL;
        unsigned long long zero = 0;
        rc = cudaDeviceGetDefaultMemPool(&pool, 0);
        if (rc == 0) rc = cudaMemPoolSetAttribute(pool, 6, &zero);
        if (rc == 0) rc = cudaMemPoolSetAttribute(pool, 8, &zero);
        printf("poolreset rc=%d\n", rc);
    } else if (!strcmp(op, "meminfo")) {
        size_t free_bytes = 0, total = 0;
        rc = cudaMemGetInfo(&free_bytes, &total);
        printf("meminfo rc=%d free=%zu total=%zu\n", rc, free_bytes, total);
    } else if (!strcmp(op, "device")) {
        rc = cudaSetDevice(atoi(fields[1]));
        printf("device %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "touch")) {
        int i = slot(fields[1]);
        char *c = names[i].ptr;
        c[0] = 1;
        c[names[i].size - 1] = 2;
        printf("touch %s ok\n", fields[1]);
    } else if (!strcmp(op, "fork")) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            char a[] = "malloc:child:1M", b[] = "meminfo", c[] = "free:child";
            run(a); run(b); run(c);
            printf("child pid=%d done\n", (int)getpid());
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("fork child=%d status=%d\n", (int)child, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    } else if (!strcmp(op, "forkrest")) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            printf("child pid=%d\n", (int)getpid());
            fflush(stdout);
            for (int i = 0; i < rest_count; i++) {
                char next[256];
                snprintf(next, sizeof next, "%s", rest[i]);
                if (run(next)) exit(3);
            }
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("forkrest child=%d status=%d\n", (int)child, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        stop = 1;
    } else if (!strcmp(op, "atexit_free")) {
        static char name[32];
        snprintf(name, sizeof name, "%s", fields[1]);
        exit_free_name = name;
        atexit(free_at_exit);
        printf("atexit_free %s\n", name);
    } else if (!strcmp(op, "launch")) {
        static char kernel;
        void *args[1] = {NULL};
        rc = launch_by(fields[1], &kernel, args, 0);
        if (rc == -1) { fprintf(stderr, "client: unknown launch %s\n", fields[1]); return 3; }
        printf("launch %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "kernel")) {
        static char copy_kernel;
        static int described;
        if (!described) {
            size_t sizes[3] = {4, 32, 8};
            describe(&copy_kernel, 3, sizes);
            described = 1;
        }
        int n = 64;
        struct { int tag, pad; void *src; int x, y; void *dst; } pair = {
            7, 0, named_or_null(fields[2]), 1, 2, named_or_null(fields[3])};
        void *extra = named_or_null(fields[4]);
        void *args[3] = {&n, &pair, &extra};
        rc = launch_by(fields[1], &copy_kernel, args, (cudaStream_t)0x51);
        if (rc == -1) { fprintf(stderr, "client: unknown launch %s\n", fields[1]); return 3; }
        printf("kernel %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "opaque")) {
        static char opaque_kernel;
        void *target = lookup(fields[2]);
        void *args[1] = {&target};
        rc = launch_by(fields[1], &opaque_kernel, args, 0);
        printf("opaque %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "matmul")) {
        NEEDS_CUBLAS("cuBLASLt");
        rc = cublasLtMatmul(NULL, NULL, NULL, lookup(fields[1]), NULL, lookup(fields[2]), NULL, NULL, NULL,
                            NULL, lookup(fields[3]), NULL, NULL, NULL, 0, (void *)0x52);
        printf("matmul rc=%d\n", rc);
    } else if (!strcmp(op, "gemm")) {
        NEEDS_CUBLAS("cuBLAS");
        if (!fields[6]) {
            fprintf(stderr, "client: gemm takes A:B:C:M:N:S\n");
            return 3;
        }
        int rows = atoi(fields[4]), columns = atoi(fields[5]);
        /* S of "-": the handle's stream is left as it was (never set: the default stream). */
        rc = strcmp(fields[6], "-") ? cublasSetStream_v2(&blas_handle, stream_numbered(fields[6])) : 0;
        if (rc == 0)
            rc = cublasGemmEx(&blas_handle, 0, 0, rows, columns, 1, NULL, lookup(fields[1]), 0, rows, lookup(fields[2]), 0,
                              1, NULL, lookup(fields[3]), 0, rows, 0, -1);
        printf("gemm rc=%d\n", rc);
    } else if (!strcmp(op, "blasunseen")) {
        /* The handle's stream changed where the shim cannot see it (the fake
         * cuBLAS reads the handle as this struct). */
        blas_handle.stream = stream_numbered(fields[1]);
        printf("blasunseen rc=0\n");
    } else if (!strcmp(op, "workspace")) {
        NEEDS_CUBLAS("cuBLAS");
        rc = cublasSetWorkspace_v2(&blas_handle, lookup(fields[1]), 1 << 20);
        printf("workspace rc=%d\n", rc);
    } else if (!strcmp(op, "rss")) {
        FILE *status = fopen("/proc/self/status", "r");
        char line[256];
        long kib = -1;
        while (status && fgets(line, sizeof line, status))
            if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
        if (status) fclose(status);
        printf("rss kib=%ld\n", kib);
    } else if (!strcmp(op, "conv")) {
        /* The fake's variant pack; its pointers are set as a framework sets
         * a real one's. */
        struct { long long count; void *pointers[8]; void *workspace; } pack = {0};
        void *data[3] = {lookup(fields[1]), lookup(fields[2]), lookup(fields[3])};
        void *workspace = lookup(fields[4]);
        static int (*execute)(void *, void *, void *);
        static int (*set)(void *, int, int, long long, const void *);
        if (!execute) {
            /* Global, as a framework loads it; the lookup then finds the
             * first definition, as a call through the PLT would. */
            if (!dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "client: %s\n", dlerror()); return 3; }
            execute = (int (*)(void *, void *, void *))dlsym(RTLD_DEFAULT, "cudnnBackendExecute");
            set = (int (*)(void *, int, int, long long, const void *))dlsym(RTLD_DEFAULT, "cudnnBackendSetAttribute");
        }
        rc = set(&pack, 1001, 6, 3, data);
        if (!rc) rc = set(&pack, 1003, 6, 1, &workspace);
        if (!rc) rc = execute(NULL, NULL, &pack);
        printf("conv rc=%d\n", rc);
    } else if (!strcmp(op, "bn")) {
        typedef int (*bn_fn)(void *, int, int, const void *, const void *, void *, const void *, void *, const void *,
                             void *, void *, void *, const void *, const void *, double, void *, void *, double,
                             void *, void *, void *, void *, size_t, void *, size_t);
        if (!dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "client: %s\n", dlerror()); return 3; }
        bn_fn bn = (bn_fn)dlsym(RTLD_DEFAULT, "cudnnBatchNormalizationForwardTrainingEx");
        rc = bn(NULL, 1, 0, NULL, NULL, NULL, lookup(fields[1]), NULL, NULL, NULL, lookup(fields[2]), NULL,
                lookup(fields[3]), NULL, 0.1, NULL, NULL, 1e-5, NULL, NULL, NULL, NULL, 0, NULL, 77);
        printf("bn rc=%d\n", rc);
    } else if (!strcmp(op, "capture")) {
        printf("capture rc=%d\n", cudaStreamBeginCapture(captured(fields[1]), 0));
    } else if (!strcmp(op, "endcapture")) {
        printf("endcapture rc=%d\n", cudaStreamEndCapture(captured(fields[1]), &graph));
    } else if (!strcmp(op, "instantiate")) {
        /* cudaGraphInstantiateParams: flags, upload stream, error node, result. */
        struct { unsigned long long flags; void *upload, *node; int result; } params = {0};
        rc = fields[1] ? cudaGraphInstantiateWithParams(&exec, graph, &params)
                       : cudaGraphInstantiateWithFlags(&exec, graph, 0);
        printf("instantiate rc=%d\n", rc);
    } else if (!strcmp(op, "replay")) {
        printf("replay rc=%d\n", cudaGraphLaunch(exec, captured(fields[1])));
    } else if (!strcmp(op, "destroy")) {
        printf("destroy rc=%d\n", cudaGraphExecDestroy(exec));
    } else if (!strcmp(op, "graphdestroy")) {
        printf("graphdestroy rc=%d\n", cudaGraphDestroy(graph));
    } else if (!strcmp(op, "lasterror")) {
        printf("lasterror rc=%d\n", cudaGetLastError());
    } else if (!strcmp(op, "step")) {
        void (*mark)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "vramshare_step");
        if (mark) mark();
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        printf("step found=%d at_us=%lld\n", mark != NULL, (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000);
    } else if (!strcmp(op, "repeat")) {
        int times = atoi(fields[1]), count = atoi(fields[2]);
        if (count > rest_count) count = rest_count;
        char **body = rest;
        for (int t = 0; t < times; t++) {
            for (int i = 0; i < count; i++) {
                char copy[256];
                snprintf(copy, sizeof copy, "%s", body[i]);
                if (run(copy)) return 3;
            }
        }
        skip = count;
        printf("repeat %d rc=0\n", times);
    } else if (!strcmp(op, "fill")) {
        static int described;
        if (!described) {
            size_t sizes[3] = {8, 8, 4};
            describe(&fill_kernel, 3, sizes);
            void (*set)(const void *, void (*)(void **)) =
                (void (*)(const void *, void (*)(void **)))dlsym(RTLD_DEFAULT, "cudaFakeSetKernel");
            if (set) set(&fill_kernel, fill_body);
            described = 1;
        }
        /* NAME+OFFSET: from that byte of NAME on. */
        const char *plus = strchr(fields[1], '+');
        char base[32];
        snprintf(base, sizeof base, "%.*s", plus ? (int)(plus - fields[1]) : (int)strlen(fields[1]), fields[1]);
        size_t offset = plus ? strtoull(plus + 1, NULL, 0) : 0;
        int i = slot(base), byte = atoi(fields[2]);
        void *target = (char *)names[i].ptr + offset;
        size_t size = names[i].size - offset;
        void *args[3] = {&target, &size, &byte};
        rc = launch_by("rt", &fill_kernel, args, stream_numbered(fields[3]));
        printf("fill %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "use")) {
        static char use_kernel;
        static int described;
        if (!described) {
            size_t sizes[8] = {8, 8, 8, 8, 8, 8, 8, 8};
            describe(&use_kernel, 8, sizes);
            void (*set)(const void *, void (*)(void **)) =
                (void (*)(const void *, void (*)(void **)))dlsym(RTLD_DEFAULT, "cudaFakeSetKernel");
            if (set) set(&use_kernel, use_body);
            described = 1;
        }
        void *targets[8] = {0}, *args[8];
        int count = 0;
        char *rest_of_names = NULL;
        for (char *name = strtok_r(fields[1], ",", &rest_of_names); name && count < 8;
             name = strtok_r(NULL, ",", &rest_of_names))
            targets[count++] = lookup(name);
        for (int i = 0; i < 8; i++) args[i] = &targets[i];
        rc = launch_by("rt", &use_kernel, args, stream_numbered(fields[2] ? fields[2] : "0"));
        printf("use rc=%d\n", rc);
    } else if (!strcmp(op, "copyout")) {
        int i = slot(fields[1]);
        free(copied);
        copied_size = names[i].size;
        copied = calloc(copied_size, 1);
        rc = cudaMemcpyAsync(copied, names[i].ptr, copied_size, 2, stream_numbered(fields[2]));
        printf("copyout %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "memset")) {
        int i = slot(fields[1]);
        rc = cudaMemsetAsync(names[i].ptr, atoi(fields[2]), names[i].size, stream_numbered(fields[3]));
        printf("memset %s rc=%d\n", fields[1], rc);
    } else if (!strcmp(op, "record")) {
        if (!event) cudaEventCreate(&event);
        printf("record rc=%d\n", cudaEventRecord(event, stream_numbered(fields[1])));
    } else if (!strcmp(op, "waitevent")) {
        printf("waitevent rc=%d\n", cudaStreamWaitEvent(stream_numbered(fields[1]), event, 0));
    } else if (!strcmp(op, "sync")) {
        printf("sync rc=%d\n", cudaDeviceSynchronize());
    } else if (!strcmp(op, "hostcount")) {
        size_t differ = 0;
        int byte = atoi(fields[1]);
        for (size_t i = 0; i < copied_size; i++) differ += copied[i] != byte;
        printf("hostcount rc=0 size=%zu differ=%zu\n", copied_size, differ);
    } else if (!strcmp(op, "hostbytes")) {
        printf("hostbytes rc=0 first=%d last=%d\n", copied_size ? copied[0] : -1, copied_size ? copied[copied_size - 1] : -1);
    } else if (!strcmp(op, "ipc")) {
        char handle[64];
        printf("ipc %s rc=%d\n", fields[1], cudaIpcGetMemHandle((void *)handle, lookup(fields[1])));
    } else if (!strcmp(op, "peekvia")) {
        static int described;
        if (!described) {
            size_t sizes[1] = {8};
            describe(&peek_kernel, 1, sizes);
            void (*set)(const void *, void (*)(void **)) =
                (void (*)(const void *, void (*)(void **)))dlsym(RTLD_DEFAULT, "cudaFakeSetKernel");
            if (set) set(&peek_kernel, peek_body);
            described = 1;
        }
        int i = slot(fields[1]);
        peek_target = names[i].ptr;
        peek_size = names[i].size;
        unsigned char **where = &peek_target;
        void *args[1] = {&where};
        rc = launch_by("rt", &peek_kernel, args, stream_numbered(fields[2]));
        cudaDeviceSynchronize();
        printf("peekvia %s rc=%d first=%d last=%d\n", fields[1], rc, peek_first, peek_last);
    } else if (!strcmp(op, "sleep")) {
        usleep(atoi(fields[1]) * 1000);
    } else {
        fprintf(stderr, "client: unknown step %s\n", op);
        return 3;
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        /* strtok writes into its argument: keep argv (and so the command
         * line other programs read in /proc) intact. */
        char step[256];
        snprintf(step, sizeof step, "%s", argv[i]);
        rest = argv + i + 1;
        rest_count = argc - i - 1;
        if (run(step)) return 3;
        if (stop) break;
        i += skip;
        skip = 0;
    }
    return 0;
}
