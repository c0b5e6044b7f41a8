/*
 * Drives a caching allocator (tests/clients/caching_allocator.c) loaded from
 * the library named first:  cache_client LIBRARY STEP...
 *   alloc:NAME:SIZE (MiB)   free:NAME (back into the cache)
 * Each step prints one line, with how often the allocator has retried.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*malloc_fn)(void **, size_t);
typedef void (*free_fn)(void *, size_t);
typedef int (*retries_fn)(void);

int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "cache_client: %s\n", dlerror()); return 3; }
    malloc_fn cache_malloc = (malloc_fn)dlsym(lib, "cache_malloc");
    free_fn cache_free = (free_fn)dlsym(lib, "cache_free");
    retries_fn cache_retries = (retries_fn)dlsym(lib, "cache_retries");
    struct { char name[16]; void *ptr; size_t size; } blocks[32] = {0};
    int n = 0;
    for (int i = 2; i < argc; i++) {
        char *op = strtok(argv[i], ":"), *name = strtok(NULL, ":"), *size = strtok(NULL, ":");
        if (!strcmp(op, "alloc")) {
            snprintf(blocks[n].name, sizeof blocks[n].name, "%s", name);
            blocks[n].size = strtoull(size, NULL, 0) << 20;
            int rc = cache_malloc(&blocks[n].ptr, blocks[n].size);
            printf("alloc %s rc=%d ptr=%p retries=%d\n", name, rc, blocks[n].ptr, cache_retries());
            n++;
        } else {
            for (int j = 0; j < n; j++)
                if (!strcmp(blocks[j].name, name)) cache_free(blocks[j].ptr, blocks[j].size);
            printf("free %s\n", name);
        }
    }
    return 0;
}
