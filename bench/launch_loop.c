/*
 * Cost of a kernel launch as a PyTorch kernel makes it (CUDA 13's host stub,
 * `__cudaLaunchKernel`, through the PLT), for run-launches to compare with
 * and without the shim. The kernel has a parameter layout the shim reads:
 * three pointers, a size, and a 128-byte struct holding two more pointers
 * among sizes and strides (as PyTorch's element-wise kernels pass their
 * offset calculators); the pointers fall inside BLOCKS live allocations,
 * a different one each launch, each thread using its own share of them.
 * With COLD_KIB, each launch is preceded by a walk over that many KiB of
 * the thread's own memory, as a framework's work between launches evicts
 * the caches: the launch then pays for every line it touches (the walk
 * costs both runs the same).
 * With BLOCK_KIB set (say 2048, where the shim makes a block of the spill
 * tier of each allocation), the blocks are that large instead of 64 KiB.
 * With PARAM_WORDS set, the struct is that many 8-byte words instead of 16,
 * two of them pointers and the rest small sizes and strides: PyTorch's
 * index and reduction kernels pass a few hundred bytes to over a kilobyte
 * (a TensorInfo of 64-bit indexes is 52 words, and some kernels take three).
 *   launch_loop THREADS BATCHES LAUNCHES BLOCKS [COLD_KIB]
 * Prints the median and the best batch in ns per launch (per thread).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
cudaError_t __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
cudaError_t cudaMalloc(void **p, size_t size);
void cudaFakeSetParams(const void *kernel, int count, const size_t *sizes);

static char kernel;
static void **blocks;
static int block_count;
/* The struct: sizes, a pointer, strides, a pointer, padding (16 words by
 * default), as an offset calculator lays them out. */
static size_t struct_words = 16;

static int batches, launches, threads_running;
static size_t cold_bytes;
static double *results; /* ns per launch, per thread and batch */

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *work(void *arg) {
    long t = (long)arg;
    dim3 grid = {80, 1, 1}, block = {256, 1, 1};
    void *a, *b, *c;
    size_t n = 4096;
    long *o = calloc(struct_words, sizeof *o);
    size_t in_at = struct_words / 2 - 2, out_at = struct_words - 2;
    for (size_t w = 0; w < struct_words; w++) o[w] = (long)(w % 7) * 64 + 1;
    void *args[5] = {&a, &b, &c, &n, o};
    /* Each thread launches on blocks of its own (its share of them), as
     * threads running separate work do. */
    int share = block_count / threads_running;
    void **mine = blocks + t * share;
    volatile unsigned char *cold = cold_bytes ? calloc(cold_bytes, 1) : NULL;
    for (int i = 0; i < batches; i++) {
        double start = now_ns();
        for (int k = 0; k < launches; k++) {
            unsigned at = (unsigned)k;
            a = (char *)mine[at % share] + 256;
            b = (char *)mine[(at + 1) % share];
            c = (char *)mine[(at + 2) % share] + 4096;
            o[in_at] = (long)mine[(at + 3) % share];
            o[out_at] = (long)mine[(at + 4) % share];
            for (size_t line = 0; line < cold_bytes; line += 64) cold[line]++;
            if (__cudaLaunchKernel(&kernel, grid, block, args, 0, 0)) { fprintf(stderr, "launch failed\n"); exit(1); }
        }
        results[t * batches + i] = (now_ns() - start) / launches;
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: launch_loop THREADS BATCHES LAUNCHES BLOCKS [COLD_KIB]\n"); return 2; }
    cold_bytes = argc == 6 ? (size_t)atol(argv[5]) << 10 : 0;
    int threads = atoi(argv[1]);
    threads_running = threads < 1 ? 1 : threads;
    batches = atoi(argv[2]);
    launches = atoi(argv[3]);
    block_count = atoi(argv[4]);
    if (block_count < 1) block_count = 1;
    blocks = calloc((size_t)block_count, sizeof *blocks);
    size_t block_bytes = getenv("BLOCK_KIB") ? (size_t)atol(getenv("BLOCK_KIB")) << 10 : 64 << 10;
    for (int i = 0; i < block_count; i++)
        if (cudaMalloc(&blocks[i], block_bytes)) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    if (getenv("PARAM_WORDS")) struct_words = (size_t)atol(getenv("PARAM_WORDS"));
    if (struct_words < 4) struct_words = 4;
    size_t sizes[5] = {8, 8, 8, 8, struct_words * sizeof(long)};
    cudaFakeSetParams(&kernel, 5, sizes);
    results = calloc((size_t)threads * batches, sizeof *results);
    pthread_t ids[64];
    for (long t = 0; t < threads && t < 64; t++) pthread_create(&ids[t], NULL, work, (void *)t);
    for (long t = 0; t < threads && t < 64; t++) pthread_join(ids[t], NULL);
    int n = threads * batches;
    qsort(results, n, sizeof *results, cmp);
    printf("median_ns=%.1f best_ns=%.1f\n", results[n / 2], results[0]);
    return 0;
}
