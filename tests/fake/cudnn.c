/*
 * A fake cuDNN in two parts, as cuDNN 9 is: built with -DGRAPH as
 * libcudnn_graph.so.9, which does the work, and without as libcudnn.so.9,
 * whose functions look their namesakes up in the graph library (dlopen and
 * dlsym, as the real one does) and forward to them. A variant pack is a
 * struct of this file, given its data pointers and workspace with
 * cudnnBackendSetAttribute; as with cuDNN 9, cudnnBackendGetAttribute gives
 * the workspace back but refuses the data pointers. Executing a plan
 * launches one kernel without parameter metadata.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS 1001
#define CUDNN_ATTR_VARIANT_PACK_WORKSPACE 1003
#define CUDNN_TYPE_VOID_PTR 6
#define CUDNN_STATUS_BAD_PARAM 2000

struct fake_pack { int64_t count; void *pointers[8]; void *workspace; };

#ifdef GRAPH
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, void *stream);
static char conv_kernel;

int cudnnBackendSetAttribute(void *descriptor, int name, int type, int64_t count, const void *elements) {
    struct fake_pack *pack = descriptor;
    if (type != CUDNN_TYPE_VOID_PTR || !pack || !elements) return CUDNN_STATUS_BAD_PARAM;
    if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && count >= 0 && count <= 8) {
        memcpy(pack->pointers, elements, (size_t)count * sizeof(void *));
        pack->count = count;
        return 0;
    }
    if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && count == 1) {
        pack->workspace = *(void *const *)elements;
        return 0;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

int cudnnBackendGetAttribute(void *descriptor, int name, int type, int64_t requested, int64_t *count, void *elements) {
    struct fake_pack *pack = descriptor;
    if (type != CUDNN_TYPE_VOID_PTR || !pack) return CUDNN_STATUS_BAD_PARAM;
    if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && requested >= 1) {
        *(void **)elements = pack->workspace;
        *count = 1;
        return 0;
    }
    return CUDNN_STATUS_BAD_PARAM;
}

/* Batch normalization, the legacy way: its two doubles must arrive intact
 * (status 2000 if not); it launches one kernel of its own. */
int cudnnBatchNormalizationForwardTrainingEx(void *handle, int mode, int ops, const void *alpha, const void *beta,
                                             void *x_desc, const void *x, void *z_desc, const void *z, void *y_desc,
                                             void *y, void *bn_desc, const void *scale, const void *bias,
                                             double factor, void *running_mean, void *running_var, double epsilon,
                                             void *save_mean, void *save_inv_var, void *activation, void *workspace,
                                             size_t workspace_size, void *reserve, size_t reserve_size) {
    if (factor != 0.1 || epsilon != 1e-5 || reserve_size != 77) return CUDNN_STATUS_BAD_PARAM;
    void *args[1] = {&y};
    dim3 grid = {16, 1, 1}, block = {128, 1, 1};
    return cudaLaunchKernel(&conv_kernel, grid, block, args, 0, NULL);
}

int cudnnBackendExecute(void *handle, void *plan, void *pack) {
    void *args[1] = {&pack};
    dim3 grid = {16, 1, 1}, block = {128, 1, 1};
    return cudaLaunchKernel(&conv_kernel, grid, block, args, 0, NULL);
}
#else
static void *part(const char *name) {
    void *graph = dlopen("libcudnn_graph.so.9", RTLD_NOW | RTLD_LOCAL);
    return graph ? dlsym(graph, name) : NULL;
}

int cudnnBackendSetAttribute(void *descriptor, int name, int type, int64_t count, const void *elements) {
    int (*real)(void *, int, int, int64_t, const void *) = part("cudnnBackendSetAttribute");
    return real ? real(descriptor, name, type, count, elements) : CUDNN_STATUS_BAD_PARAM;
}

int cudnnBackendGetAttribute(void *descriptor, int name, int type, int64_t requested, int64_t *count, void *elements) {
    int (*real)(void *, int, int, int64_t, int64_t *, void *) = part("cudnnBackendGetAttribute");
    return real ? real(descriptor, name, type, requested, count, elements) : CUDNN_STATUS_BAD_PARAM;
}

typedef int (*bn_fn)(void *, int, int, const void *, const void *, void *, const void *, void *, const void *,
                     void *, void *, void *, const void *, const void *, double, void *, void *, double, void *,
                     void *, void *, void *, size_t, void *, size_t);
int cudnnBatchNormalizationForwardTrainingEx(void *handle, int mode, int ops, const void *alpha, const void *beta,
                                             void *x_desc, const void *x, void *z_desc, const void *z, void *y_desc,
                                             void *y, void *bn_desc, const void *scale, const void *bias,
                                             double factor, void *running_mean, void *running_var, double epsilon,
                                             void *save_mean, void *save_inv_var, void *activation, void *workspace,
                                             size_t workspace_size, void *reserve, size_t reserve_size) {
    bn_fn real = (bn_fn)part("cudnnBatchNormalizationForwardTrainingEx");
    return real ? real(handle, mode, ops, alpha, beta, x_desc, x, z_desc, z, y_desc, y, bn_desc, scale, bias, factor,
                       running_mean, running_var, epsilon, save_mean, save_inv_var, activation, workspace,
                       workspace_size, reserve, reserve_size)
                : CUDNN_STATUS_BAD_PARAM;
}

int cudnnBackendExecute(void *handle, void *plan, void *pack) {
    int (*real)(void *, void *, void *) = part("cudnnBackendExecute");
    return real ? real(handle, plan, pack) : CUDNN_STATUS_BAD_PARAM;
}
#endif
