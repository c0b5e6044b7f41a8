// Whether a thread's kernel launches wait for another thread's virtual
// memory calls, as the job's launches would for the spill tier's mover
// remapping blocks: if they do not, the job's threads lose nothing to calls
// made on threads of the shim's own, and every call belongs there; if they
// do, only fewer calls can help.
//   cd scripts/gpu/bench && nvcc -O2 -std=c++17 -arch=native -o /tmp/lbv launch_beside_vm.cu -lcuda && /tmp/lbv [LAUNCHES]
// One thread launches LAUNCHES (4096) short kernels (about 5 us each) on a
// stream of its own, timing each launch call on the host, waiting for the
// stream every 256 launches so the queue never fills. Beside it, another
// thread, in turn: nothing; host memory of 16 MiB (the tier's kind, on the
// device's NUMA node) mapped, its access set and unmapped over and over, as
// the mover sends blocks out; device memory of 8 MiB made, mapped, set,
// unmapped and released over and over, as allocations make blocks. Prints
// one JSON object per neighbour: the launch calls' median, 90th and 99th
// percentile and mean (us), the launches' wall time (ms), and how many
// rounds of calls the other thread made meanwhile.
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cu_check.h"

__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

enum class Beside { Nothing, HostRemaps, DeviceBlocks };

static void calls_until(Beside what, CUdevice dev, CUcontext context, std::atomic<bool> &stop,
                        std::atomic<bool> &started, size_t &rounds) {
    CU(cuCtxSetCurrent(context));
    const CUmemAccessDesc access = device_access(dev);
    if (what == Beside::HostRemaps) {
        size_t bytes = 16 << 20;
        CUmemAllocationProp on_host = pinned_prop(true, host_numa_node(dev));
        CUmemGenericAllocationHandle h;
        CU(cuMemCreate(&h, bytes, &on_host, 0));
        CUdeviceptr at;
        CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
        started = true;
        while (!stop.load()) {
            CU(cuMemMap(at, bytes, 0, h, 0));
            CU(cuMemSetAccess(at, bytes, &access, 1));
            CU(cuMemUnmap(at, bytes));
            rounds++;
        }
        CU(cuMemAddressFree(at, bytes));
        CU(cuMemRelease(h));
    } else if (what == Beside::DeviceBlocks) {
        size_t bytes = 8 << 20;
        CUmemAllocationProp on_device = pinned_prop(false, 0);
        CUdeviceptr at;
        CU(cuMemAddressReserve(&at, bytes, 2 << 20, 0, 0));
        started = true;
        while (!stop.load()) {
            CUmemGenericAllocationHandle h;
            CU(cuMemCreate(&h, bytes, &on_device, 0));
            CU(cuMemMap(at, bytes, 0, h, 0));
            CU(cuMemSetAccess(at, bytes, &access, 1));
            CU(cuMemUnmap(at, bytes));
            CU(cuMemRelease(h));
            rounds++;
        }
        CU(cuMemAddressFree(at, bytes));
    } else {
        started = true;
    }
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 4096;
    CUdevice dev = first_device();
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    long long cycles = (long long)clock_khz * 5 / 1000;  // about 5 us
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    spin<<<1, 32, 0, stream>>>(cycles);
    cudaStreamSynchronize(stream);
    const std::pair<const char *, Beside> rows[] = {
        {"nothing", Beside::Nothing},
        {"host memory remapped on another thread", Beside::HostRemaps},
        {"device memory made and given back on another thread", Beside::DeviceBlocks},
        {"nothing again", Beside::Nothing},
    };
    for (const auto &[name, what] : rows) {
        std::atomic<bool> stop{false}, started{false};
        size_t rounds = 0;
        std::thread other([&] { calls_until(what, dev, context, stop, started, rounds); });
        while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        size_t rounds_before = rounds;
        std::vector<double> us;
        us.reserve(launches);
        double began = now_ms();
        for (int i = 0; i < launches; i++) {
            double t = now_ms();
            spin<<<1, 32, 0, stream>>>(cycles);
            us.push_back((now_ms() - t) * 1000.0);
            if (i % 256 == 255) cudaStreamSynchronize(stream);
        }
        cudaStreamSynchronize(stream);
        double wall = now_ms() - began;
        size_t rounds_during = rounds - rounds_before;
        stop = true;
        other.join();
        if (cudaGetLastError() != cudaSuccess) {
            fprintf(stderr, "a launch failed\n");
            return 1;
        }
        std::vector<double> sorted = us;
        std::sort(sorted.begin(), sorted.end());
        double mean = 0;
        for (double v : us) mean += v;
        mean /= us.size();
        printf("{\"beside\": \"%s\", \"launch_us_median\": %.2f, \"launch_us_p90\": %.2f, "
               "\"launch_us_p99\": %.2f, \"launch_us_mean\": %.2f, \"launches_ms\": %.1f, "
               "\"other_rounds\": %zu}\n",
               name, sorted[sorted.size() / 2], sorted[sorted.size() * 9 / 10],
               sorted[sorted.size() * 99 / 100], mean, wall, rounds_during);
        fflush(stdout);
    }
    cudaStreamDestroy(stream);
    return 0;
}
