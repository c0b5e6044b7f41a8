/*
 * A program with two CUDA runtimes loaded, as a framework built for one
 * CUDA version and an extension built for another make it: it opens the
 * modules named by its arguments (each linked against its own runtime),
 * and each registers a kernel with its runtime and launches it.
 *   two_runtimes MODULE...
 * Built as the module too, with -DMODULE: run() registers and launches.
 */
#include <stdio.h>

#ifdef MODULE
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
void cudaFakeRegisterKernel(const void *kernel);
static char kernel;
int run(void) {
    dim3 grid = {2, 1, 1}, block = {64, 1, 1};
    cudaFakeRegisterKernel(&kernel);
    return cudaLaunchKernel(&kernel, grid, block, NULL, 0, NULL);
}
#else
#include <dlfcn.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        void *module = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        int (*run)(void) = module ? (int (*)(void))dlsym(module, "run") : NULL;
        if (!run) { fprintf(stderr, "two_runtimes: %s\n", dlerror()); return 3; }
        printf("module %d rc=%d\n", i, run());
    }
    return 0;
}
#endif
