/*
 * A CUDA program driven by its arguments, one step each, for the tests:
 *   malloc:NAME:SIZE  managed:NAME:SIZE  async:NAME:SIZE  async_ptsz:NAME:SIZE
 *   pool:NAME:SIZE  pool_ptsz:NAME:SIZE  pitch:NAME:WIDTH:HEIGHT  m3d:NAME:W:H:D
 *   free:NAME  freeasync:NAME  freeasync_ptsz:NAME  (NAME may be a 0x address)
 *   meminfo  device:N  touch:NAME (write its first and last byte)  fork  sleep:MS
 *   forkrest (a child runs the steps after it; the parent waits for it and ends)
 *   atexit_free:NAME (at exit, cudaFree NAME; registered now, so best first)
 *   launch:HOW (one kernel launch: rt, rt_ptsz, stub, stub_ptsz, exc, exc_ptsz,
 *   coop, coop_ptsz, graph, graph_ptsz)
 * SIZE is bytes, or with K, M or G (binary). Each step prints one line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"

#define MAX_NAMES 64
static struct { char name[32]; void *ptr; size_t size; } names[MAX_NAMES];

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
    for (int i = 0; i < MAX_NAMES; i++)
        if (!strcmp(names[i].name, name)) return i;
    for (int i = 0; i < MAX_NAMES; i++)
        if (!names[i].name[0]) { snprintf(names[i].name, sizeof names[i].name, "%s", name); return i; }
    fprintf(stderr, "client: too many names\n");
    exit(3);
}

static void *lookup(const char *name) {
    if (!strncmp(name, "0x", 2)) return (void *)(size_t)strtoull(name, NULL, 16);
    return names[slot(name)].ptr;
}

static int run(char *step);

/* The steps after the current one, for forkrest. */
static char **rest;
static int rest_count;
static int stop;

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
    char *fields[6] = {0};
    int n = 0;
    for (char *tok = strtok(step, ":"); tok && n < 6; tok = strtok(NULL, ":")) fields[n++] = tok;
    const char *op = fields[0];
    void *p = NULL;
    cudaError_t rc;
    if (!strcmp(op, "malloc") || !strcmp(op, "managed") || !strcmp(op, "async") ||
        !strcmp(op, "async_ptsz") || !strcmp(op, "pool") || !strcmp(op, "pool_ptsz")) {
        size_t size = parse_size(fields[2]);
        if (!strcmp(op, "malloc")) rc = cudaMalloc(&p, size);
        else if (!strcmp(op, "managed")) rc = cudaMallocManaged(&p, size, 1);
        else if (!strcmp(op, "async")) rc = cudaMallocAsync(&p, size, 0);
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
        rc = !strcmp(op, "free") ? cudaFree(p) : !strcmp(op, "freeasync") ? cudaFreeAsync(p, 0) : cudaFreeAsync_ptsz(p, 0);
        printf("%s %s rc=%d\n", op, fields[1], rc);
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
        const char *how = fields[1];
        dim3 grid = {4, 1, 1}, block = {128, 1, 1};
        void *args[1] = {NULL};
        if (!strcmp(how, "rt")) rc = cudaLaunchKernel(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "rt_ptsz")) rc = cudaLaunchKernel_ptsz(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "stub")) rc = __cudaLaunchKernel(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "stub_ptsz")) rc = __cudaLaunchKernel_ptsz(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "exc")) rc = cudaLaunchKernelExC(NULL, &kernel, args);
        else if (!strcmp(how, "exc_ptsz")) rc = cudaLaunchKernelExC_ptsz(NULL, &kernel, args);
        else if (!strcmp(how, "coop")) rc = cudaLaunchCooperativeKernel(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "coop_ptsz")) rc = cudaLaunchCooperativeKernel_ptsz(&kernel, grid, block, args, 0, 0);
        else if (!strcmp(how, "graph")) rc = cudaGraphLaunch(&kernel, 0);
        else if (!strcmp(how, "graph_ptsz")) rc = cudaGraphLaunch_ptsz(&kernel, 0);
        else { fprintf(stderr, "client: unknown launch %s\n", how); return 3; }
        printf("launch %s rc=%d\n", how, rc);
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
    }
    return 0;
}
