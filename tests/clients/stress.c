/*
 * THREADS threads make OPS random allocations and frees each (cudaMalloc or
 * cudaMallocAsync, freed with the matching call), then stop with some blocks
 * still live. Prints each live block ("live PTR SIZE"), then the total.
 *   stress THREADS OPS MAX_SIZE SEED [sync]   (sync: cudaMalloc only)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_api.h"

#define KEEP 64
static int ops;
static size_t max_size;
static unsigned seed;
static int sync_only;
struct held { void *ptr; size_t size; int async; };
struct worker { pthread_t thread; unsigned seed; struct held held[KEEP]; int count; long failures; };

static void *work(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < ops; i++) {
        unsigned r = rand_r(&w->seed);
        if (w->count < KEEP && (w->count == 0 || r % 100 < 55)) {
            size_t size = 1 + rand_r(&w->seed) % max_size;
            int async = rand_r(&w->seed) % 2 && !sync_only;
            void *p = NULL;
            int rc = async ? cudaMallocAsync(&p, size, 0) : cudaMalloc(&p, size);
            if (rc != 0) { w->failures++; continue; }
            ((char *)p)[0] = 1;
            ((char *)p)[size - 1] = 1;
            w->held[w->count++] = (struct held){p, size, async};
        } else {
            int k = rand_r(&w->seed) % w->count;
            struct held h = w->held[k];
            w->held[k] = w->held[--w->count];
            int rc = h.async ? cudaFreeAsync(h.ptr, 0) : cudaFree(h.ptr);
            if (rc != 0) w->failures++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: stress THREADS OPS MAX_SIZE SEED [sync]\n"); return 3; }
    sync_only = argc == 6;
    int threads = atoi(argv[1]);
    ops = atoi(argv[2]);
    max_size = strtoull(argv[3], NULL, 0);
    seed = (unsigned)atoi(argv[4]);
    struct worker *workers = calloc(threads, sizeof *workers);
    for (int t = 0; t < threads; t++) {
        workers[t].seed = seed + t;
        pthread_create(&workers[t].thread, NULL, work, &workers[t]);
    }
    size_t live = 0;
    long failures = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        for (int i = 0; i < workers[t].count; i++) {
            printf("live %p %zu\n", workers[t].held[i].ptr, workers[t].held[i].size);
            live += workers[t].held[i].size;
        }
        failures += workers[t].failures;
    }
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    printf("total live=%zu failures=%ld free=%zu total=%zu\n", live, failures, free_bytes, total);
    return 0;
}
