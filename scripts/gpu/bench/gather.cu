// Embedding-style gathers and scatters over a 16 GiB table, with the table
// placed six ways, to find what a partly spilled table costs
// (bench/NOTES.md attempt 4):
//   device     cudaMalloc
//   host       managed; preferred location host, accessed by the device
//              (vramshare's spill today)
//   split      managed; first half preferred on the device and populated by
//              the GPU's first touch, second half as "host" (the reverted
//              split placement)
//   split-pre  as split, with the first half prefetched to the device
//              before the first touch
//   async      cudaMallocAsync from the device's pool (PyTorch's
//              cudaMallocAsync backend)
//   vmm        the virtual memory API, as the spill tier makes a block on
//              the device: one cuMemCreate handle, mapped at a reserved
//              range, read and write access for the device
// Each step reads 65,536 rows of 128 floats (75% of them in the table's
// first 1%) and adds to them, like the sparse job. Prints one line per
// placement: mean ms per step over 50 steps after 5 warm-up steps.
// Build: nvcc -O2 -arch=sm_90 -o gather gather.cu -lcuda
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

const size_t ROWS = 1ull << 25, DIM = 128, LOOKUPS = 65536;

__global__ void init(float *t, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) t[i] = 1e-3f * (i % 1000);
}

// One warp per lookup: read the row into out, then add a little to it.
__global__ void step(float *t, const unsigned *index, float *out) {
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= LOOKUPS) return;
    float *row = t + (size_t)index[warp] * DIM;
    float acc = 0;
    for (size_t k = lane; k < DIM; k += 32) acc += row[k];
    out[warp * 32 + lane] = acc;
    for (size_t k = lane; k < DIM; k += 32) atomicAdd(&row[k], 1e-6f);
}

#define CU_CHECK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { printf("%s: CUDA error %d\n", #x, r); exit(1); } } while (0)

// Device memory as the spill tier maps it; the handle, for the free.
static float *vmm_alloc(size_t bytes, CUmemGenericAllocationHandle *handle) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUdeviceptr p;
    CU_CHECK(cuMemAddressReserve(&p, bytes, 2 << 20, 0, 0));
    CU_CHECK(cuMemCreate(handle, bytes, &prop, 0));
    CU_CHECK(cuMemMap(p, bytes, 0, *handle, 0));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_CHECK(cuMemSetAccess(p, bytes, &access, 1));
    return (float *)p;
}

static void advise(void *p, size_t n, cudaMemoryAdvise a, int dev) {
    cudaMemLocation loc = {dev < 0 ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice, dev < 0 ? 0 : dev};
    CHECK(cudaMemAdvise(p, n, a, loc));
}

int main() {
    size_t bytes = ROWS * DIM * sizeof(float), half = bytes / 2;
    std::vector<unsigned> host_index(LOOKUPS);
    srand(1);
    for (size_t i = 0; i < LOOKUPS; i++) {
        size_t r = ((size_t)rand() << 16) ^ rand();
        host_index[i] = i % 4 < 3 ? r % (ROWS / 100) : r % ROWS;
    }
    unsigned *index;
    float *out;
    CHECK(cudaMalloc(&index, LOOKUPS * sizeof(unsigned)));
    CHECK(cudaMalloc(&out, LOOKUPS * 32 * sizeof(float)));
    CHECK(cudaMemcpy(index, host_index.data(), LOOKUPS * sizeof(unsigned), cudaMemcpyHostToDevice));
    const char *names[] = {"device", "host", "split", "split-pre", "async", "vmm"};
    // GATHER_PLACEMENTS="device vmm", say, runs only those.
    const char *only = getenv("GATHER_PLACEMENTS");
    for (int kind = 0; kind < 6; kind++) {
        if (only && !strstr(only, names[kind])) continue;
        float *t;
        CUmemGenericAllocationHandle handle = 0;
        if (kind == 0) {
            CHECK(cudaMalloc(&t, bytes));
        } else if (kind == 4) {
            CHECK(cudaMallocAsync((void **)&t, bytes, 0));
        } else if (kind == 5) {
            t = vmm_alloc(bytes, &handle);
        } else {
            CHECK(cudaMallocManaged(&t, bytes));
            size_t device_part = kind == 1 ? 0 : half;
            if (device_part) advise(t, device_part, cudaMemAdviseSetPreferredLocation, 0);
            advise((char *)t + device_part, bytes - device_part, cudaMemAdviseSetPreferredLocation, -1);
            advise((char *)t + device_part, bytes - device_part, cudaMemAdviseSetAccessedBy, 0);
            if (kind == 3) {
                cudaMemLocation dev = {cudaMemLocationTypeDevice, 0};
                CHECK(cudaMemPrefetchAsync(t, device_part, dev, 0, 0));
            }
        }
        init<<<4096, 256>>>(t, ROWS * DIM);
        CHECK(cudaDeviceSynchronize());
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        for (int i = 0; i < 5; i++) step<<<LOOKUPS * 32 / 256, 256>>>(t, index, out);
        cudaEventRecord(a);
        for (int i = 0; i < 50; i++) step<<<LOOKUPS * 32 / 256, 256>>>(t, index, out);
        cudaEventRecord(b);
        CHECK(cudaEventSynchronize(b));
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        printf("{\"placement\": \"%s\", \"ms_per_step\": %.4f}\n", names[kind], ms / 50);
        fflush(stdout);
        if (kind == 5) {
            CU_CHECK(cuMemUnmap((CUdeviceptr)t, bytes));
            CU_CHECK(cuMemRelease(handle));
            CU_CHECK(cuMemAddressFree((CUdeviceptr)t, bytes));
        } else if (kind == 4) {
            CHECK(cudaFreeAsync(t, 0));
            CHECK(cudaDeviceSynchronize());
        } else {
            CHECK(cudaFree(t));
        }
    }
    return 0;
}
