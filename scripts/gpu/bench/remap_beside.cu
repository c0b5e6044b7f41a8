// What setting access to a mapping costs beside copies out of the device,
// by where the copies come from and how they are queued. Setting access
// costs about 1 ms more a mapping while a copy engine copies out of the
// device (remap_batch.cu); this asks whether that holds when the copies
// are queued one, two or three at a time, on a stream of the lowest
// priority, or by another process (its own address space on the GPU).
//   remap_beside [BLOCKS [MIB [COPY_MIB [host|device]]]]
// Prints one JSON object per measure: milliseconds to set access to all
// BLOCKS mappings of MIB each (median of three rounds) and what the copies
// carried meanwhile. `remap_beside copier MIB DEPTH in|out` is the other
// process's part: it copies until its standard input closes.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "cu_check.h"

// Copies of `bytes` one way, `depth` queued at a time on a stream of
// `priority` (0: the default), until `stop`; returns GB/s carried.
static double copy_until(std::atomic<bool> &stop, std::atomic<bool> &started, size_t bytes, int depth,
                         bool out, int priority) {
    CUdeviceptr device_side;
    void *pinned;
    CUstream stream;
    CU(cuMemAlloc(&device_side, bytes * depth));
    CU(cuMemHostAlloc(&pinned, bytes * depth, 0));
    CU(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, priority));
    std::vector<CUevent> done(depth);
    for (auto &e : done) CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    size_t copies = 0;
    double began = now_ms();
    for (size_t i = 0; !stop.load(); i++) {
        int slot = i % depth;
        if (i >= size_t(depth)) {
            CU(cuEventSynchronize(done[slot]));
            copies++;
        }
        if (i == size_t(depth)) started = true;
        char *h = static_cast<char *>(pinned) + slot * bytes;
        CUdeviceptr d = device_side + slot * bytes;
        if (out)
            CU(cuMemcpyDtoHAsync(h, d, bytes, stream));
        else
            CU(cuMemcpyHtoDAsync(d, h, bytes, stream));
        CU(cuEventRecord(done[slot], stream));
        if (depth == 1) {
            CU(cuEventSynchronize(done[slot]));
            copies++;
            i = size_t(-1);  // slot 0 again, nothing left to wait for
            started = true;
        }
    }
    double took = now_ms() - began;
    CU(cuStreamSynchronize(stream));
    for (auto &e : done) CU(cuEventDestroy(e));
    CU(cuStreamDestroy(stream));
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(device_side));
    return double(copies) * bytes / took / 1e6;
}

static int copier(size_t mib, int depth, bool out) {
    first_device();
    std::atomic<bool> stop{false}, started{false};
    std::thread watch([&] {
        while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
        printf("ready\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {
        }
        stop = true;
    });
    double rate = copy_until(stop, started, mib << 20, depth, out, 0);
    watch.join();
    printf("%.1f\n", rate);
    fflush(stdout);
    return 0;
}

static void report(const char *beside, const Mappings &b, double ms, double rate) {
    printf("{\"beside\": \"%s\", \"blocks\": %zu, \"mib\": %zu, \"access_ms\": %.3f, \"per_mapping_ms\": %.3f, "
           "\"copies_gb_per_s\": %.1f}\n",
           beside, b.handles.size(), b.bytes >> 20, ms, ms / b.handles.size(), rate);
    fflush(stdout);
}

// Copies from a thread of this process while the blocks are remapped.
static void beside_thread(const char *name, const Mappings &b, CUcontext context, size_t mib, int depth, bool out,
                          int priority) {
    std::atomic<bool> stop{false}, started{false};
    double rate = 0;
    std::thread t([&] {
        CU(cuCtxSetCurrent(context));
        rate = copy_until(stop, started, mib << 20, depth, out, priority);
    });
    while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    double ms = access_ms(b);
    stop = true;
    t.join();
    report(name, b, ms, rate);
}

// Copies from another process (this program as `copier`).
static void beside_process(const char *name, const Mappings &b, size_t mib, int depth, bool out) {
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        std::string m = std::to_string(mib), d = std::to_string(depth);
        execl("/proc/self/exe", "remap_beside", "copier", m.c_str(), d.c_str(), out ? "out" : "in", nullptr);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    FILE *child_out = fdopen(from_child[0], "r");
    char line[64] = {0};
    if (!fgets(line, sizeof line, child_out) || strncmp(line, "ready", 5) != 0) {
        fprintf(stderr, "the copier did not start\n");
        kill(pid, SIGTERM);
        waitpid(pid, nullptr, 0);
        exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    double ms = access_ms(b);
    close(to_child[1]);
    double rate = 0;
    if (fgets(line, sizeof line, child_out)) rate = atof(line);
    fclose(child_out);
    waitpid(pid, nullptr, 0);
    report(name, b, ms, rate);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "copier") == 0 && argc == 5)
        return copier(atoi(argv[2]), atoi(argv[3]), strcmp(argv[4], "out") == 0);
    size_t blocks = argc > 1 ? atoi(argv[1]) : 64;
    size_t mib = argc > 2 ? atoi(argv[2]) : 4;
    size_t copy_mib = argc > 3 ? atoi(argv[3]) : 16;
    bool on_device = argc > 4 && strcmp(argv[4], "device") == 0;
    CUdevice dev = first_device();
    CUcontext context;
    CU(cuCtxGetCurrent(&context));
    int least, greatest;
    CU(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUmemAllocationProp p = pinned_prop(!on_device, host_numa_node(dev));
    Mappings b = make_mappings(blocks, mib << 20, p);
    report("idle", b, access_ms(b), 0);
    beside_thread("out, this process, 16 queued", b, context, copy_mib, 16, true, 0);
    beside_thread("out, this process, 1 at a time", b, context, copy_mib, 1, true, 0);
    beside_thread("out, this process, 2 at a time", b, context, copy_mib, 2, true, 0);
    beside_thread("out, this process, 3 at a time", b, context, copy_mib, 3, true, 0);
    beside_thread("out, this process, lowest priority", b, context, copy_mib, 16, true, least);
    beside_thread("out, this process, highest priority", b, context, copy_mib, 16, true, greatest);
    beside_thread("in, this process, 16 queued", b, context, copy_mib, 16, false, 0);
    beside_process("out, another process, 16 queued", b, copy_mib, 16, true);
    beside_process("out, another process, 1 at a time", b, copy_mib, 1, true);
    beside_process("in, another process, 16 queued", b, copy_mib, 16, false);
    report("idle again", b, access_ms(b), 0);
    free_mappings(b);
    CU(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
