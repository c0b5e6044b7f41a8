// A CUDA graph built node by node through the runtime, as a program that
// does not capture from a stream does: a kernel node computing
// y = a * x + y over two buffers, and a child graph whose kernel node scales
// a third. It is instantiated once and launched REPLAYS times; the results
// are checked on the host. Prints one JSON line.
//   graph_nodes [REPLAYS]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

__global__ void axpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void scale(int n, float s, float *z) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] *= s;
}

#define CHECK(call)                                                             \
    do {                                                                        \
        cudaError_t rc = (call);                                                \
        if (rc != cudaSuccess) {                                                \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(rc));         \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    int replays = argc > 1 ? atoi(argv[1]) : 5;
    int n = 1 << 20;
    size_t bytes = n * sizeof(float);
    float *x, *y, *z;
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMalloc(&z, bytes));
    std::vector<float> ones(n, 1.0f);
    CHECK(cudaMemcpy(x, ones.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, ones.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(z, ones.data(), bytes, cudaMemcpyHostToDevice));

    cudaGraph_t graph, child;
    CHECK(cudaGraphCreate(&graph, 0));
    CHECK(cudaGraphCreate(&child, 0));
    float a = 2.0f, s = 0.5f;
    void *axpy_args[] = {&n, &a, &x, &y};
    void *scale_args[] = {&n, &s, &z};
    cudaKernelNodeParams params = {};
    params.gridDim = dim3((n + 255) / 256);
    params.blockDim = dim3(256);
    params.func = (void *)scale;
    params.kernelParams = scale_args;
    cudaGraphNode_t node, child_node;
    CHECK(cudaGraphAddKernelNode(&node, child, nullptr, 0, &params));
    params.func = (void *)axpy;
    params.kernelParams = axpy_args;
    CHECK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &params));
    CHECK(cudaGraphAddChildGraphNode(&child_node, graph, &node, 1, child));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < replays; i++) CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaDeviceSynchronize());

    std::vector<float> got_y(n), got_z(n);
    CHECK(cudaMemcpy(got_y.data(), y, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_z.data(), z, bytes, cudaMemcpyDeviceToHost));
    float want_y = 1.0f + 2.0f * replays, want_z = 1.0f;
    for (int i = 0; i < replays; i++) want_z *= 0.5f;
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += got_y[i] != want_y || got_z[i] != want_z;
    printf("{\"replays\": %d, \"x\": \"%p\", \"y\": \"%p\", \"z\": \"%p\", \"wrong\": %d}\n",
           replays, (void *)x, (void *)y, (void *)z, wrong);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphDestroy(child));
    return wrong != 0;
}
