// What a tier that moves blocks at fixed addresses would pay, measured on
// one GPU: a 64 MiB block at one reserved address, backed by 2 MiB chunks
// of host-located physical memory, read in place by a kernel; then each
// chunk copied to device-located memory on a stream of its own (after an
// event of the last use) and remapped at the same address; the kernel
// again. Also the host cost of cudaEventRecord, which a tier would make
// after the launches whose blocks it may move.
//   remap_probe
// Prints two JSON lines. Everything it allocates is freed before it exits.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cu_check.h"
#define RT(call)                                                                       \
    do {                                                                               \
        cudaError_t rc = (call);                                                       \
        if (rc != cudaSuccess) {                                                       \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(rc));                \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

__global__ void fill(float *data, size_t n) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        data[i] = (float)(i % 1024);
}

// Reads the block `passes` times (a kernel reusing its operand), summing.
__global__ void sum(const float *data, size_t n, int passes, double *out) {
    double local = 0;
    for (int p = 0; p < passes; p++)
        for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            local += data[i];
    atomicAdd(out, local);
}

int main() {
    const size_t chunk = 2 << 20, chunks = 32, bytes = chunk * chunks, n = bytes / sizeof(float);
    const int passes = 8;
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    CUmemAllocationProp host = {}, device = {};
    host.type = device.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    host.location.id = 0;
    device.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    device.location.id = 0;
    size_t granularity = 0;
    CU(cuMemGetAllocationGranularity(&granularity, &host, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (chunk % granularity) {
        fprintf(stderr, "host granularity %zu does not divide 2 MiB\n", granularity);
        return 1;
    }
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    // The block, and a staging range the copies land in.
    CUdeviceptr va = 0, staging = 0;
    CU(cuMemAddressReserve(&va, bytes, chunk, 0, 0));
    CU(cuMemAddressReserve(&staging, bytes, chunk, 0, 0));
    std::vector<CUmemGenericAllocationHandle> in_host(chunks), on_device(chunks);
    for (size_t c = 0; c < chunks; c++) {
        CU(cuMemCreate(&in_host[c], chunk, &host, 0));
        CU(cuMemMap(va + c * chunk, chunk, 0, in_host[c], 0));
    }
    CU(cuMemSetAccess(va, bytes, &access, 1));

    cudaStream_t job, mover;
    RT(cudaStreamCreateWithFlags(&job, cudaStreamNonBlocking));
    RT(cudaStreamCreateWithFlags(&mover, cudaStreamNonBlocking));
    cudaEvent_t last_use, copied, start, stop;
    RT(cudaEventCreateWithFlags(&last_use, cudaEventDisableTiming));
    RT(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    RT(cudaEventCreate(&start));
    RT(cudaEventCreate(&stop));
    double *result;
    RT(cudaMalloc(&result, 2 * sizeof(double)));
    RT(cudaMemsetAsync(result, 0, 2 * sizeof(double), job));

    float *data = (float *)va;
    fill<<<264, 256, 0, job>>>(data, n);
    RT(cudaEventRecord(start, job));
    sum<<<264, 256, 0, job>>>(data, n, passes, result);
    RT(cudaEventRecord(stop, job));
    RT(cudaEventRecord(last_use, job));
    RT(cudaEventSynchronize(stop));
    float in_host_ms = 0;
    RT(cudaEventElapsedTime(&in_host_ms, start, stop));

    // The host cost of an event record, with work queued ahead of it.
    sum<<<264, 256, 0, job>>>(data, n, passes * 4, result + 1);
    const int records = 10000;
    double t0 = now_ms();
    for (int i = 0; i < records; i++) RT(cudaEventRecord(copied, job));
    double record_ns = (now_ms() - t0) * 1e6 / records;
    RT(cudaStreamSynchronize(job));
    RT(cudaEventRecord(last_use, job));

    // Each chunk: device memory at the staging address, a copy on the
    // mover's stream after the last use, then the block's address remapped.
    double copy_ms = 0, remap_ms = 0;
    for (size_t c = 0; c < chunks; c++) {
        CU(cuMemCreate(&on_device[c], chunk, &device, 0));
        CU(cuMemMap(staging + c * chunk, chunk, 0, on_device[c], 0));
        CU(cuMemSetAccess(staging + c * chunk, chunk, &access, 1));
        double c0 = now_ms();
        RT(cudaStreamWaitEvent(mover, last_use, 0));
        RT(cudaMemcpyAsync((void *)(staging + c * chunk), (void *)(va + c * chunk), chunk,
                           cudaMemcpyDefault, mover));
        RT(cudaEventRecord(copied, mover));
        RT(cudaEventSynchronize(copied));
        double c1 = now_ms();
        CU(cuMemUnmap(va + c * chunk, chunk));
        CU(cuMemMap(va + c * chunk, chunk, 0, on_device[c], 0));
        CU(cuMemSetAccess(va + c * chunk, chunk, &access, 1));
        CU(cuMemUnmap(staging + c * chunk, chunk));
        CU(cuMemRelease(in_host[c]));
        double c2 = now_ms();
        copy_ms += c1 - c0;
        remap_ms += c2 - c1;
    }

    double before[2], after = 0;
    RT(cudaMemcpy(before, result, 2 * sizeof(double), cudaMemcpyDeviceToHost));
    RT(cudaMemsetAsync(result, 0, sizeof(double), job));
    RT(cudaEventRecord(start, job));
    sum<<<264, 256, 0, job>>>(data, n, passes, result);
    RT(cudaEventRecord(stop, job));
    RT(cudaEventSynchronize(stop));
    float on_device_ms = 0;
    RT(cudaEventElapsedTime(&on_device_ms, start, stop));
    RT(cudaMemcpy(&after, result, sizeof(double), cudaMemcpyDeviceToHost));

    // What a tier pays to make and drop whole blocks' physical memory, and
    // to remap a whole block with one handle, at sizes PyTorch's segments
    // take; and both copy directions at once on two streams.
    const size_t sizes[] = {2 << 20, 64 << 20, 512 << 20};
    double create_ms[2][3], release_ms[2][3], remap_whole_ms[3] = {0, 0, 0};
    for (int where = 0; where < 2; where++) {
        for (int s = 0; s < 3; s++) {
            CUmemGenericAllocationHandle handle;
            double r0 = now_ms();
            CU(cuMemCreate(&handle, sizes[s], where ? &host : &device, 0));
            double r1 = now_ms();
            if (where == 0) {
                CUdeviceptr range = 0;
                CU(cuMemAddressReserve(&range, sizes[s], chunk, 0, 0));
                CU(cuMemMap(range, sizes[s], 0, handle, 0));
                CU(cuMemSetAccess(range, sizes[s], &access, 1));
                double m0 = now_ms();
                CU(cuMemUnmap(range, sizes[s]));
                CU(cuMemMap(range, sizes[s], 0, handle, 0));
                CU(cuMemSetAccess(range, sizes[s], &access, 1));
                remap_whole_ms[s] = now_ms() - m0;
                CU(cuMemUnmap(range, sizes[s]));
                CU(cuMemAddressFree(range, sizes[s]));
            }
            double r2 = now_ms();
            CU(cuMemRelease(handle));
            create_ms[where][s] = r1 - r0;
            release_ms[where][s] = now_ms() - r2;
        }
    }
    const size_t big = 512 << 20;
    CUdeviceptr dev_a = 0, dev_b = 0, host_a = 0, host_b = 0;
    CUmemGenericAllocationHandle handles[4];
    CUdeviceptr *ranges[4] = {&dev_a, &dev_b, &host_a, &host_b};
    for (int i = 0; i < 4; i++) {
        CU(cuMemCreate(&handles[i], big, i < 2 ? &device : &host, 0));
        CU(cuMemAddressReserve(ranges[i], big, chunk, 0, 0));
        CU(cuMemMap(*ranges[i], big, 0, handles[i], 0));
        CU(cuMemSetAccess(*ranges[i], big, &access, 1));
    }
    cudaStream_t other;
    RT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    RT(cudaDeviceSynchronize());
    double b0 = now_ms();
    RT(cudaMemcpyAsync((void *)dev_a, (void *)host_a, big, cudaMemcpyDefault, mover));
    RT(cudaMemcpyAsync((void *)host_b, (void *)dev_b, big, cudaMemcpyDefault, other));
    RT(cudaDeviceSynchronize());
    double both_ms = now_ms() - b0;
    double one0 = now_ms();
    RT(cudaMemcpyAsync((void *)dev_a, (void *)host_a, big, cudaMemcpyDefault, mover));
    RT(cudaDeviceSynchronize());
    double in_ms = now_ms() - one0;
    double idle0 = now_ms();
    for (int i = 0; i < 1000; i++) RT(cudaDeviceSynchronize());
    double idle_sync_us = now_ms() - idle0;
    double q0 = now_ms();
    for (int i = 0; i < 10000; i++) cudaEventQuery(copied);
    double query_ns = (now_ms() - q0) * 1e6 / 10000;
    for (int i = 0; i < 4; i++) {
        CU(cuMemUnmap(*ranges[i], big));
        CU(cuMemAddressFree(*ranges[i], big));
        CU(cuMemRelease(handles[i]));
    }
    printf("{\"create_ms\": {\"device\": [%.3f, %.3f, %.3f], \"host\": [%.3f, %.3f, %.3f]}, "
           "\"release_ms\": {\"device\": [%.3f, %.3f, %.3f], \"host\": [%.3f, %.3f, %.3f]}, "
           "\"remap_whole_ms\": [%.3f, %.3f, %.3f], \"sizes_MiB\": [2, 64, 512], "
           "\"in_GBps\": %.2f, \"both_directions_GBps_each\": %.2f, "
           "\"idle_device_sync_us\": %.2f, \"event_query_ns\": %.1f}\n",
           create_ms[0][0], create_ms[0][1], create_ms[0][2], create_ms[1][0], create_ms[1][1],
           create_ms[1][2], release_ms[0][0], release_ms[0][1], release_ms[0][2], release_ms[1][0],
           release_ms[1][1], release_ms[1][2], remap_whole_ms[0], remap_whole_ms[1],
           remap_whole_ms[2], big / in_ms / 1e6, big / both_ms / 1e6, idle_sync_us, query_ns);

    printf("{\"block_bytes\": %zu, \"chunk_bytes\": %zu, \"host_granularity\": %zu, "
           "\"event_record_ns\": %.1f, \"copy_ms\": %.3f, \"copy_GBps\": %.2f, "
           "\"remap_us_per_chunk\": %.1f, \"sum_in_host_ms\": %.3f, \"sum_on_device_ms\": %.3f, "
           "\"sums_equal\": %s}\n",
           bytes, chunk, granularity, record_ns, copy_ms, bytes / copy_ms / 1e6,
           remap_ms * 1e3 / chunks, in_host_ms, on_device_ms, before[0] == after ? "true" : "false");

    CU(cuMemUnmap(va, bytes));
    for (size_t c = 0; c < chunks; c++) CU(cuMemRelease(on_device[c]));
    CU(cuMemAddressFree(va, bytes));
    CU(cuMemAddressFree(staging, bytes));
    RT(cudaFree(result));
    return before[0] == after ? 0 : 1;
}
