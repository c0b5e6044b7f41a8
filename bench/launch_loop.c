/*
 * Cost of a kernel launch as a PyTorch kernel makes it (CUDA 13's host stub,
 * `__cudaLaunchKernel`, through the PLT), for run-launches to compare with
 * and without the shim.
 *   launch_loop THREADS BATCHES LAUNCHES
 * Prints the median and the best batch in ns per launch (per thread).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
cudaError_t __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shared, void *stream);

static int batches, launches;
static double *results; /* ns per launch, per thread and batch */

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *work(void *arg) {
    long t = (long)arg;
    static char kernel;
    dim3 grid = {80, 1, 1}, block = {256, 1, 1};
    /* A kernel of four parameters: three pointers and a size. */
    void *a = &kernel, *b = &kernel, *c = &kernel;
    size_t n = 4096;
    void *args[4] = {&a, &b, &c, &n};
    for (int i = 0; i < batches; i++) {
        double start = now_ns();
        for (int k = 0; k < launches; k++)
            if (__cudaLaunchKernel(&kernel, grid, block, args, 0, 0)) { fprintf(stderr, "launch failed\n"); exit(1); }
        results[t * batches + i] = (now_ns() - start) / launches;
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: launch_loop THREADS BATCHES LAUNCHES\n"); return 2; }
    int threads = atoi(argv[1]);
    batches = atoi(argv[2]);
    launches = atoi(argv[3]);
    results = calloc((size_t)threads * batches, sizeof *results);
    pthread_t ids[64];
    for (long t = 0; t < threads && t < 64; t++) pthread_create(&ids[t], NULL, work, (void *)t);
    for (long t = 0; t < threads && t < 64; t++) pthread_join(ids[t], NULL);
    int n = threads * batches;
    qsort(results, n, sizeof *results, cmp);
    printf("median_ns=%.1f best_ns=%.1f\n", results[n / 2], results[0]);
    return 0;
}
