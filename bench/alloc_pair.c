/*
 * Cost of a cudaMalloc + cudaFree pair, as a program sees it through the PLT.
 *   alloc_pair THREADS BATCHES PAIRS SIZE [async]
 * Each thread makes BATCHES batches of PAIRS pairs; prints the median and the
 * best batch in ns per pair (per thread), for run-alloc-pair to compare with
 * and without the shim. With "async", each pair is a cudaMallocAsync +
 * cudaFreeAsync on a stream of the thread's own (as PyTorch's
 * backend:cudaMallocAsync allocates each tensor), and the stream is
 * synchronized after each batch. With COLD_KIB set in the environment,
 * each allocation and each free is preceded by a walk over that many KiB
 * of the thread's own memory, as a framework's work between its calls
 * evicts the caches (bench/run-launch-lines counts the lines missed).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaFree(void *p);
typedef void *cudaStream_t;
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *p, cudaStream_t stream);

static int batches, pairs, async;
static size_t size, cold_bytes;
static double *results; /* ns per pair, per thread and batch */

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *work(void *arg) {
    long t = (long)arg;
    cudaStream_t stream = NULL;
    if (async && cudaStreamCreate(&stream)) { fprintf(stderr, "no stream\n"); exit(1); }
    volatile unsigned char *cold = cold_bytes ? calloc(cold_bytes, 1) : NULL;
    for (int b = 0; b < batches; b++) {
        double start = now_ns();
        for (int i = 0; i < pairs; i++) {
            void *p;
            for (size_t line = 0; line < cold_bytes; line += 64) cold[line]++;
            int rc = async ? cudaMallocAsync(&p, size, stream) : cudaMalloc(&p, size);
            for (size_t line = 0; line < cold_bytes; line += 64) cold[line]++;
            rc = rc || (async ? cudaFreeAsync(p, stream) : cudaFree(p));
            if (rc) { fprintf(stderr, "allocation failed\n"); exit(1); }
        }
        if (async) cudaStreamSynchronize(stream);
        results[t * batches + b] = (now_ns() - start) / pairs;
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: alloc_pair THREADS BATCHES PAIRS SIZE [async]\n"); return 2; }
    async = argc == 6;
    int threads = atoi(argv[1]);
    batches = atoi(argv[2]);
    pairs = atoi(argv[3]);
    size = strtoull(argv[4], NULL, 0);
    cold_bytes = getenv("COLD_KIB") ? (size_t)atol(getenv("COLD_KIB")) << 10 : 0;
    results = calloc((size_t)threads * batches, sizeof *results);
    pthread_t ids[64];
    for (long t = 0; t < threads; t++) pthread_create(&ids[t], NULL, work, (void *)t);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    int n = threads * batches;
    qsort(results, n, sizeof *results, cmp);
    printf("median_ns=%.1f best_ns=%.1f\n", results[n / 2], results[0]);
    return 0;
}
