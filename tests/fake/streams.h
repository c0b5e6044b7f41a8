/*
 * Asynchronous streams for the fake runtime, run as a GPU runs them: each
 * stream is a queue of work (copies, kernels, event records and waits) that
 * a thread of its own runs in order, each item FAKE_CUDA_STREAM_DELAY_US
 * after it is reached (default 0). Work ordered only by the host's call
 * order, and not by a stream or an event, then shows up out of order: a
 * copy on one stream reads a buffer before a kernel on another has written
 * it, unless an event orders them, as on a GPU.
 *
 * A kernel runs on its stream if the test gave it a body
 * (cudaFakeSetKernel); its arguments are copied at launch by its parameter
 * layout (memory.h), as CUDA copies them. Other launches only log.
 *
 * FAKE_CUDA_COPY_NO_DATA=1 leaves the bytes of copies and memsets on
 * streams where they are: for benchmarks whose kernels read nothing, so
 * that the host's own copying does not stand in the way of the time the
 * cost model gives the copy.
 *
 * FAKE_CUDA_KERNEL_US (default 0) gives kernels time, for benchmarks of
 * the shim's moves beside them: each kernel then takes that long besides,
 * and one whose parameters point into host-located memory of the fake
 * driver also reads it in place, at the driver's cost (costs.h).
 *
 * FAKE_CUDA_REFUSE_STREAM_WAITS=1 refuses every wait of a stream for an
 * event (CUDA_ERROR_NOT_SUPPORTED), so that what a caller does when CUDA
 * will not order a stream after an event can be tested.
 *
 * The null stream is a stream like the others here (no implicit
 * synchronisation with the rest); cudaMemcpy and cudaDeviceSynchronize wait
 * for every stream.
 */
#include <sys/prctl.h>
#define MAX_STREAMS 32
#define QUEUED 4096
#define ARG_BYTES 512

enum work_kind { WORK_COPY, WORK_SET, WORK_KERNEL, WORK_RECORD, WORK_WAIT, WORK_CALL };

/* An event's records are numbered as made; each completes when its
 * stream reaches it, in any order between streams. A wait, a query and a
 * synchronisation concern the record latest when they are made, as CUDA's
 * do: an event recorded again on another stream, one that runs ahead,
 * leaves the earlier waits waiting for the record they were made after. */
struct fake_event {
    unsigned long recorded; /* records made (on the host) */
    unsigned long *pending; /* the numbers of those not yet reached */
    size_t pending_count, pending_room;
};

/* With `stream_lock` held: where record `generation` of `e` is among those
 * pending (pending_count if it is not: it completed). */
static size_t pending_at(const struct fake_event *e, unsigned long generation) {
    size_t i = 0;
    while (i < e->pending_count && e->pending[i] != generation) i++;
    return i;
}

/* With `stream_lock` held: whether record `generation` of `e` completed. */
static int record_reached(const struct fake_event *e, unsigned long generation) {
    return pending_at(e, generation) == e->pending_count;
}

struct work {
    int kind;
    void *dst;
    const void *src;
    size_t bytes;
    struct fake_event *event;
    unsigned long generation;
    void (*body)(void **args);
    void (*call)(void *arg); /* WORK_CALL's, with `dst` */
    /* A kernel's argument values, and where each lies among them. */
    unsigned char values[ARG_BYTES];
    size_t offsets[MAX_PARAMS];
};

struct fake_stream {
    int started;
    pthread_t thread;
    unsigned long head, tail; /* work taken, work queued */
    struct work queue[QUEUED];
};

static struct fake_stream streams[MAX_STREAMS];
static int streams_made = 1; /* streams[0] is the null stream */
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stream_moved = PTHREAD_COND_INITIALIZER;
static size_t stream_delay_us, kernel_us, copy_no_data;
__attribute__((constructor)) static void read_stream_settings(void) {
    copy_no_data = env_size("FAKE_CUDA_COPY_NO_DATA", 0);
    stream_delay_us = env_size("FAKE_CUDA_STREAM_DELAY_US", 0);
    kernel_us = env_size("FAKE_CUDA_KERNEL_US", 0);
    /* Sleeps that stand for work end on time: Linux lets a sleep run up to
     * 50 us late by default, a third of a replayed kernel. Threads made
     * later (streams, the shim's) inherit it from the thread loading this. */
    if (kernel_us) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

/* The fake driver's costs (costs.h), found as the runtime loads it. */
static void (*driver_link_cost)(const void *dst, const void *src, size_t n);
static size_t (*driver_read_in_place)(const unsigned char *args, size_t n);
static void (*driver_launch_wait)(void);

/* A kernel's time, with its reads of host memory in place. */
static void kernel_time(const unsigned char *values) {
    if (!kernel_us) return;
    usleep((useconds_t)kernel_us);
    if (driver_read_in_place) driver_read_in_place(values, ARG_BYTES);
}

/* Kernels given a body by the test. */
static struct { const void *kernel; void (*body)(void **args); } bodies[64];
static int body_count;

static void *run_stream(void *arg) {
    struct fake_stream *s = arg;
    pthread_mutex_lock(&stream_lock);
    for (;;) {
        while (s->head == s->tail) pthread_cond_wait(&stream_moved, &stream_lock);
        struct work *w = &s->queue[s->head % QUEUED];
        if (w->kind == WORK_WAIT) {
            while (!record_reached(w->event, w->generation)) pthread_cond_wait(&stream_moved, &stream_lock);
        } else {
            pthread_mutex_unlock(&stream_lock);
            if (stream_delay_us) usleep((useconds_t)stream_delay_us);
            if (w->kind == WORK_COPY && driver_link_cost) driver_link_cost(w->dst, w->src, w->bytes);
            if (w->kind == WORK_COPY && !copy_no_data) memcpy(w->dst, w->src, w->bytes);
            if (w->kind == WORK_SET && !copy_no_data) memset(w->dst, (int)w->generation, w->bytes);
            if (w->kind == WORK_CALL) w->call(w->dst);
            if (w->kind == WORK_KERNEL) {
                kernel_time(w->values);
                void *args[MAX_PARAMS];
                for (int i = 0; i < MAX_PARAMS; i++) args[i] = w->values + w->offsets[i];
                w->body(args);
            }
            pthread_mutex_lock(&stream_lock);
            if (w->kind == WORK_RECORD) {
                struct fake_event *e = w->event;
                size_t i = pending_at(e, w->generation);
                if (i < e->pending_count) e->pending[i] = e->pending[--e->pending_count];
            }
        }
        s->head++;
        pthread_cond_broadcast(&stream_moved);
    }
    return NULL;
}

/* How many items queued or running on the streams `touches` [lo, hi). */
static int queued_touching(int (*touches)(const struct work *, unsigned long long, unsigned long long),
                           unsigned long long lo, unsigned long long hi) {
    int count = 0;
    pthread_mutex_lock(&stream_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        for (unsigned long k = streams[i].head; k != streams[i].tail; k++)
            count += touches(&streams[i].queue[k % QUEUED], lo, hi);
    pthread_mutex_unlock(&stream_lock);
    return count;
}

/* A kernel with an argument word pointing into [lo, hi). */
static int kernel_names(const struct work *w, unsigned long long lo, unsigned long long hi) {
    if (w->kind != WORK_KERNEL) return 0;
    for (size_t at = 0; at + sizeof(unsigned long long) <= ARG_BYTES; at += sizeof(unsigned long long)) {
        unsigned long long word;
        memcpy(&word, w->values + at, sizeof word);
        if (word >= lo && word < hi) return 1;
    }
    return 0;
}

/* A copy or set reading or writing [lo, hi). */
static int copy_touches(const struct work *w, unsigned long long lo, unsigned long long hi) {
    if (w->kind != WORK_COPY && w->kind != WORK_SET) return 0;
    unsigned long long dst = (uintptr_t)w->dst, src = (uintptr_t)w->src;
    int writes = dst < hi && dst + w->bytes > lo;
    int reads = w->kind == WORK_COPY && src < hi && src + w->bytes > lo;
    return writes || reads;
}

/* How many kernels queued or running on the streams have an argument word
 * pointing into [lo, hi): what a remap of that range would pull from under
 * them. The fake driver asks, to log such an unmap. */
int cudaFakeKernelsUsing(unsigned long long lo, unsigned long long hi) {
    return queued_touching(kernel_names, lo, hi);
}

/* How many copies and sets queued or running on the streams read or write
 * [lo, hi): a remap of that range under them would fault on a GPU, or let
 * them read or write what is mapped there next. */
int cudaFakeCopiesUsing(unsigned long long lo, unsigned long long hi) {
    return queued_touching(copy_touches, lo, hi);
}

static struct fake_stream *stream_of(void *handle) {
    /* CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the null stream here. */
    if ((uintptr_t)handle == 1 || (uintptr_t)handle == 2) handle = NULL;
    struct fake_stream *s = handle ? handle : &streams[0];
    return s >= streams && s < streams + MAX_STREAMS ? s : NULL;
}

/* Queues `w` on `handle`'s stream; INVALID_VALUE for a stream not made here. */
static int enqueue(void *handle, const struct work *w) {
    struct fake_stream *s = stream_of(handle);
    if (!s) return INVALID_VALUE;
    pthread_mutex_lock(&stream_lock);
    if (!s->started) {
        s->started = 1;
        pthread_create(&s->thread, NULL, run_stream, s);
        pthread_detach(s->thread);
    }
    while (s->tail - s->head == QUEUED) pthread_cond_wait(&stream_moved, &stream_lock);
    s->queue[s->tail % QUEUED] = *w;
    s->tail++;
    pthread_cond_broadcast(&stream_moved);
    pthread_mutex_unlock(&stream_lock);
    return OK;
}

static void *new_stream(void) {
    pthread_mutex_lock(&stream_lock);
    void *s = streams_made < MAX_STREAMS ? &streams[streams_made++] : NULL;
    pthread_mutex_unlock(&stream_lock);
    return s;
}

static void drain(struct fake_stream *s) {
    pthread_mutex_lock(&stream_lock);
    while (s->head != s->tail) pthread_cond_wait(&stream_moved, &stream_lock);
    pthread_mutex_unlock(&stream_lock);
}

static void drain_all(void) {
    for (int i = 0; i < MAX_STREAMS; i++) drain(&streams[i]);
}

static int enqueue_copy(void *dst, const void *src, size_t bytes, void *stream) {
    struct work w = {.kind = WORK_COPY, .dst = dst, .src = src, .bytes = bytes};
    return enqueue(stream, &w);
}

/* Frees are stream-ordered where kernels take time (memory.h). */
static int ordered_frees(void) { return kernel_us != 0; }
static int queue_after(void *stream, void (*fn)(void *), void *arg) {
    struct work w = {.kind = WORK_CALL, .call = fn, .dst = arg};
    return enqueue(stream, &w) == OK;
}

static int enqueue_set(void *dst, int value, size_t bytes, void *stream) {
    struct work w = {.kind = WORK_SET, .dst = dst, .generation = (unsigned char)value, .bytes = bytes};
    return enqueue(stream, &w);
}

static int record_event(struct fake_event *e, void *stream) {
    /* Counted only where it can be queued: else it would never be reached. */
    if (!stream_of(stream)) return INVALID_VALUE;
    pthread_mutex_lock(&stream_lock);
    if (e->pending_count == e->pending_room) {
        size_t room = e->pending_room ? 2 * e->pending_room : 4;
        unsigned long *grown = realloc(e->pending, room * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&stream_lock);
            return MEMORY_ALLOCATION;
        }
        e->pending = grown;
        e->pending_room = room;
    }
    unsigned long generation = ++e->recorded;
    e->pending[e->pending_count++] = generation;
    pthread_mutex_unlock(&stream_lock);
    struct work w = {.kind = WORK_RECORD, .event = e, .generation = generation};
    return enqueue(stream, &w);
}

/* Whether stream waits are refused (FAKE_CUDA_REFUSE_STREAM_WAITS). */
static int stream_waits_refused(void) {
    static int refused = -1;
    if (refused < 0) refused = getenv("FAKE_CUDA_REFUSE_STREAM_WAITS") != NULL;
    return refused;
}

static void sync_event(struct fake_event *e) {
    pthread_mutex_lock(&stream_lock);
    unsigned long generation = e->recorded;
    while (!record_reached(e, generation)) pthread_cond_wait(&stream_moved, &stream_lock);
    pthread_mutex_unlock(&stream_lock);
}

static int wait_event(void *stream, struct fake_event *e) {
    if (stream_waits_refused()) {
        trace("cudaStreamWaitEvent refused stream=%p", stream);
        return NOT_SUPPORTED;
    }
    /* A stream of the fake driver's own (its cost model off): its work runs
     * as it is given, so the work given after this wait waits for the
     * event here, as one stream handle serves both APIs on a GPU. */
    if (stream && !stream_of(stream)) {
        sync_event(e);
        return OK;
    }
    pthread_mutex_lock(&stream_lock);
    unsigned long generation = e->recorded;
    pthread_mutex_unlock(&stream_lock);
    struct work w = {.kind = WORK_WAIT, .event = e, .generation = generation};
    return enqueue(stream, &w);
}

static int event_done(struct fake_event *e) {
    pthread_mutex_lock(&stream_lock);
    int done = record_reached(e, e->recorded);
    pthread_mutex_unlock(&stream_lock);
    return done;
}

/* A launch of `kernel` with `args` on `stream`: queued if it has a body
 * (1), else nothing to run (0); -1 if its arguments do not fit. */
static int enqueue_kernel(const void *kernel, void **args, void *stream) {
    void (*body)(void **) = NULL;
    for (int i = 0; i < body_count; i++)
        if (bodies[i].kernel == kernel) body = bodies[i].body;
    if (!body) return 0;
    if (driver_launch_wait) driver_launch_wait();
    struct work w = {.kind = WORK_KERNEL, .body = body};
    for (size_t i = 0, offset, size; i < MAX_PARAMS && param_info(kernel, i, &offset, &size) == OK; i++) {
        if (offset + size > ARG_BYTES) return -1;
        memcpy(w.values + offset, args[i], size);
        w.offsets[i] = offset;
    }
    return enqueue(stream, &w) == OK ? 1 : -1;
}

/* The fake driver's streams, events and copies are these, with its cost
 * model on (driver_copies.h): the runtime's own functions for them, which
 * no hook stands in front of. */
void *cudaFakeStreamNew(void) { return new_stream(); }
int cudaFakeCopyAsync(void *dst, const void *src, size_t n, void *stream) { return enqueue_copy(dst, src, n, stream); }
int cudaFakeSetAsync(void *dst, int value, size_t n, void *stream) { return enqueue_set(dst, value, n, stream); }
int cudaFakeCallAsync(void *stream, void (*fn)(void *), void *arg) { return queue_after(stream, fn, arg) ? OK : INVALID_VALUE; }
void *cudaFakeEventNew(void) { return calloc(1, sizeof(struct fake_event)); }
int cudaFakeEventRecord(void *event, void *stream) { return record_event(event, stream); }
int cudaFakeStreamWait(void *stream, void *event) { return wait_event(stream, event); }
int cudaFakeEventDone(void *event) { return event_done(event); }
void cudaFakeEventSync(void *event) { sync_event(event); }
void cudaFakeStreamSync(void *stream) {
    struct fake_stream *s = stream_of(stream);
    if (s) drain(s);
}
void cudaFakeSyncAll(void) { drain_all(); }
