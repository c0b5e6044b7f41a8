// Host time per kernel launch on a real GPU, for comparing with and without
// the shim: an empty kernel of five parameters (four pointers into live
// allocations and a size), launched with <<<>>> (CUDA 13's host stub,
// __cudaLaunchKernel, as PyTorch's kernels are), in batches of 1000 with a
// synchronize between batches so that the launch queue never fills.
//   launch_rate BATCHES
// Prints the median and best batch in ns per launch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty(float *a, float *b, float *c, float *d, size_t n) {
    if (n == 0 && threadIdx.x == 1234) a[0] = b[0] + c[0] + d[0];
}

int main(int argc, char **argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 50;
    const int per_batch = 1000, blocks = 64;
    std::vector<float *> live(blocks);
    for (auto &p : live)
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    std::vector<double> ns;
    for (int b = 0; b < batches + 2; b++) {
        cudaDeviceSynchronize();
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < per_batch; i++)
            empty<<<1, 32>>>(live[i % blocks], live[(i + 1) % blocks], live[(i + 2) % blocks],
                             live[(i + 3) % blocks] + 16, 1 << 18);
        auto end = std::chrono::steady_clock::now();
        if (b >= 2) ns.push_back(std::chrono::duration<double, std::nano>(end - start).count() / per_batch);
    }
    cudaDeviceSynchronize();
    if (cudaGetLastError() != cudaSuccess) { fprintf(stderr, "launch failed\n"); return 1; }
    std::sort(ns.begin(), ns.end());
    printf("median_ns=%.1f best_ns=%.1f\n", ns[ns.size() / 2], ns[0]);
    return 0;
}
