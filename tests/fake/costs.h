/*
 * What moving memory costs on a GPU, in the fake driver, for benchmarks and
 * tests of how the shim's moves overlap a job's kernels. Off unless set.
 * Included by cuda.c after its tables of physical memory and mappings.
 *
 *   FAKE_CUDA_LINK_MIB_PER_S: a copy between host-located and
 *     device-located memory of the virtual memory API takes its size over
 *     this rate, and each direction of the link carries one such copy at a
 *     time, as a GPU's copy engines share the two directions of its PCIe
 *     link. With it set and the fake runtime loaded, the driver's streams
 *     are the runtime's (driver_copies.h), so the copy takes that time on
 *     its stream's thread, beside the kernels; copies made at once (the
 *     synchronous ones, or with no runtime loaded) take none.
 *   FAKE_CUDA_REMAP_US_PER_MIB: cuMemMap and cuMemUnmap hold their caller
 *     this long for each MiB, one at a time, as the driver serialises them.
 *   FAKE_CUDA_CALL_US: cuMemCreate of device memory, cuMemRelease and
 *     cuMemUnmap hold their caller this long besides, one at a time with the
 *     remaps (an H100 took 20 to 40 us for each idle).
 *   FAKE_CUDA_ACCESS_US and FAKE_CUDA_HOST_ACCESS_US_PER_MIB: cuMemSetAccess
 *     holds its caller the first, and the second for each MiB of host
 *     memory it maps, one call at a time with the remaps (an H200 took a
 *     flat 0.02 to 0.04 ms for device memory, and 9.4 us a MiB of host).
 *   FAKE_CUDA_PIN_US_PER_MIB: cuMemCreate in host memory holds its caller
 *     this long a MiB, and cuMemRelease of it a tenth of that (an H200
 *     pinned at about 5.4 GB/s, 190 us a MiB, and released at 17).
 *   FAKE_CUDA_HOST_ACCESS_DELAY_MS: cuMemSetAccess of host memory holds
 *     its caller this long besides, as setting access to host memory does
 *     on a GPU whose copy engine is copying out (about a millisecond there).
 *   FAKE_CUDA_ACCESS_WAIT_US: cuMemSetAccess waits for the copy toward
 *     the host under way to end, up to this long, as setting access beside
 *     a copy out of a GPU's memory does (up to about 1 ms on an H200).
 *   FAKE_CUDA_LINK_PIECE_BYTES: what waits for a copy toward the host
 *     under way (setting access, a launch) waits only for the piece of
 *     this many bytes under way: for a replay whose copies out stand for
 *     larger ones (bench/trace-loop's SCALE), made in pieces on a GPU.
 *   FAKE_CUDA_IN_PLACE_CROSSINGS: with kernels taking time (the runtime's
 *     FAKE_CUDA_KERNEL_US, streams.h), a kernel whose parameters point into
 *     host-located memory reads it in place: its stream waits for that many
 *     crossings of those bytes over the link toward the device, sharing it
 *     with the copies (a kernel reading host memory in place reads each byte
 *     many times over: 16 for ResNet-50's spilled bytes on an H200).
 *   FAKE_CUDA_LAUNCH_WAITS_FOR_COPY=1: a kernel launch through the runtime
 *     waits in the call for the copies crossing the link when it is made to
 *     end, as a launch beside an H200's copy engines' copies waits for about
 *     the copy under way (5 to 7 ms beside 256 MiB copies, 0.3 to 0.7 ms
 *     beside 16 MiB ones, none measurable beside 2 MiB ones).
 *
 * The rates are to be chosen in proportion to one another and to the
 * kernels' time, as a GPU's are; their size is the fake's, not a GPU's.
 */
static size_t link_mib_per_s, remap_us_per_mib, in_place_crossings, access_wait_us, launch_waits;
static size_t call_us, access_us, host_access_us_per_mib, host_access_delay_ms, pin_us_per_mib, link_piece;
__attribute__((constructor)) static void read_costs(void) {
    host_access_delay_ms = env_size("FAKE_CUDA_HOST_ACCESS_DELAY_MS", 0);
    access_us = env_size("FAKE_CUDA_ACCESS_US", 0);
    call_us = env_size("FAKE_CUDA_CALL_US", 0);
    host_access_us_per_mib = env_size("FAKE_CUDA_HOST_ACCESS_US_PER_MIB", 0);
    pin_us_per_mib = env_size("FAKE_CUDA_PIN_US_PER_MIB", 0);
    launch_waits = env_size("FAKE_CUDA_LAUNCH_WAITS_FOR_COPY", 0);
    link_piece = env_size("FAKE_CUDA_LINK_PIECE_BYTES", 0);
    link_mib_per_s = env_size("FAKE_CUDA_LINK_MIB_PER_S", 0);
    remap_us_per_mib = env_size("FAKE_CUDA_REMAP_US_PER_MIB", 0);
    in_place_crossings = env_size("FAKE_CUDA_IN_PLACE_CROSSINGS", 0);
    access_wait_us = env_size("FAKE_CUDA_ACCESS_WAIT_US", 0);
}
/* The link toward the device, and toward the host: one copy at a time
 * each way. Whether a copy is under way each way, and the pieces of copies
 * ended (a copy toward the host ends a piece every link_piece bytes, where
 * set, else once), for the calls that wait for the copy under way. */
static pthread_mutex_t link_lock[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t piece_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t piece_ended = PTHREAD_COND_INITIALIZER;
static int copying[2];
static unsigned long pieces_ended[2];

/* Marks a copy `toward_host` under way (1) or over (0), or a piece of it
 * ended (-1). */
static void link_state(int toward_host, int state) {
    pthread_mutex_lock(&piece_lock);
    if (state >= 0) copying[toward_host] = state;
    pieces_ended[toward_host]++;
    pthread_cond_broadcast(&piece_ended);
    pthread_mutex_unlock(&piece_lock);
}

/* Waits for the piece of a copy `toward_host` under way to end, up to
 * `most_us` (0: however long). */
static void wait_for_piece(int toward_host, size_t most_us) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(most_us % 1000000) * 1000;
    until.tv_sec += (time_t)(most_us / 1000000) + until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    pthread_mutex_lock(&piece_lock);
    unsigned long seen = pieces_ended[toward_host];
    while (copying[toward_host] && pieces_ended[toward_host] == seen)
        if (most_us ? pthread_cond_timedwait(&piece_ended, &piece_lock, &until) != 0
                    : pthread_cond_wait(&piece_ended, &piece_lock) != 0)
            break;
    pthread_mutex_unlock(&piece_lock);
}

static pthread_mutex_t remap_lock = PTHREAD_MUTEX_INITIALIZER;

/* Holds the caller `us`, one at a time with the other remaps. */
static void hold_remap(double us) {
    if (us < 1) return;
    pthread_mutex_lock(&remap_lock);
    usleep((useconds_t)us);
    pthread_mutex_unlock(&remap_lock);
}

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

/* Making (or, `making` 0, releasing) `host_bytes` of physical memory in
 * host memory (device memory costs nothing here). */
static void pin_cost(size_t host_bytes, int making) {
    if (!host_bytes || !pin_us_per_mib) return;
    double us = mib(host_bytes) * (double)pin_us_per_mib / (making ? 1.0 : 10.0);
    if (us >= 1) usleep((useconds_t)us);
}

/* Setting access to `size` bytes (`host`: mapping host memory): its own
 * cost, then held until the piece of the copy toward the host under way
 * ends, or access_wait_us. */
static void access_cost(int host, size_t size) {
    if (host && host_access_delay_ms) usleep((useconds_t)(host_access_delay_ms * 1000));
    hold_remap((double)access_us + (host ? mib(size) * (double)host_access_us_per_mib : 0));
    if (access_wait_us) wait_for_piece(1, access_wait_us);
}
/* Called by the fake runtime's launches, on the launching thread: waits
 * for the copy under way each way (toward the host, its piece) to end. */
void cudaFakeLaunchWait(void) {
    if (!launch_waits || !link_mib_per_s) return;
    for (int toward_host = 0; toward_host < 2; toward_host++) wait_for_piece(toward_host, 0);
}

static void hold_link(int toward_host, double bytes) {
    double piece = toward_host && link_piece ? (double)link_piece : bytes;
    pthread_mutex_lock(&link_lock[toward_host]);
    link_state(toward_host, 1);
    for (double left = bytes; left > 0; left -= piece) {
        double us = (left < piece ? left : piece) * 1e6 / ((double)link_mib_per_s * 1048576.0);
        if (us >= 1) usleep((useconds_t)us);
        if (left > piece) link_state(toward_host, -1);
    }
    link_state(toward_host, 0);
    pthread_mutex_unlock(&link_lock[toward_host]);
}

/* With `lock` held: the mapping holding `at`, or -1. */
static int mapping_at(CUdeviceptr at) {
    for (int m = 0; m < mappings_used; m++)
        if (mappings[m].ptr && at >= mappings[m].ptr && at < mappings[m].ptr + mappings[m].size) return m;
    return -1;
}

/* With `lock` held: the device the mapping holding `at` is located on (-1:
 * the host), or -2 where no mapping holds it. */
static int located(CUdeviceptr at) {
    int m = mapping_at(at);
    return m < 0 ? -2 : handles[mappings[m].handle_index].device;
}

/* A copy of `n` bytes from `src` to `dst` crossing the link. */
static void link_cost(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (!link_mib_per_s) return;
    pthread_mutex_lock(&lock);
    int to = located(dst), from = located(src);
    pthread_mutex_unlock(&lock);
    if (to == -1 && from >= 0) hold_link(1, (double)n);
    if (to >= 0 && from == -1) hold_link(0, (double)n);
}

static void remap_cost(size_t size) { hold_remap(mib(size) * (double)remap_us_per_mib); }

/* The driver's own time for a call on a handle or a mapping, beside its
 * bytes': creating device memory, releasing, unmapping. */
static void call_cost(void) { hold_remap((double)call_us); }

/* Called by the fake runtime's streams before a kernel runs, with its
 * argument bytes: holds the stream while the kernel reads in place each
 * mapping of host-located memory that a pointer-sized word of them points
 * into (a block moved in parts is counted by the part it is named by).
 * The bytes read once, in place. */
size_t cudaFakeReadInPlace(const unsigned char *args, size_t n) {
    if (!link_mib_per_s || !in_place_crossings) return 0;
    size_t host_bytes = 0;
    int counted[64], found = 0;
    pthread_mutex_lock(&lock);
    for (size_t at = 0; at + sizeof(CUdeviceptr) <= n && found < 64; at += sizeof(CUdeviceptr)) {
        CUdeviceptr word;
        memcpy(&word, args + at, sizeof word);
        if (!word) continue;
        int m = mapping_at(word);
        if (m < 0 || handles[mappings[m].handle_index].device != -1) continue;
        int seen = 0;
        for (int k = 0; k < found; k++) seen |= counted[k] == m;
        if (!seen) {
            counted[found++] = m;
            host_bytes += mappings[m].size;
        }
    }
    pthread_mutex_unlock(&lock);
    if (host_bytes) hold_link(0, (double)host_bytes * (double)in_place_crossings);
    return host_bytes;
}
