/*
 * The fake driver's copies and events, included by cuda.c: copies run at
 * once, or are held back until something waits for them, and events say
 * which held-back copies came before their record.
 */
/* With the cost model on (costs.h) and the fake runtime loaded, the
 * driver's streams, events and copies are the runtime's (as CUstream and
 * cudaStream_t, CUevent and cudaEvent_t are one on a GPU): copies run in
 * order on their stream's thread, beside the kernels, taking the link's
 * time there, and events and waits order them against other streams. The
 * runtime's functions for it are its own, not the hooked API's. */
static struct {
    void *(*stream_new)(void);
    int (*copy)(void *dst, const void *src, size_t n, void *stream);
    int (*set)(void *dst, int value, size_t n, void *stream);
    int (*call)(void *stream, void (*fn)(void *), void *arg);
    void *(*event_new)(void);
    int (*record)(void *event, void *stream);
    int (*wait)(void *stream, void *event);
    int (*done)(void *event);
    void (*event_sync)(void *event);
    void (*stream_sync)(void *stream);
    void (*sync_all)(void);
} runtime;
static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;
static int runtime_found;
static void find_runtime(void) {
    if (!link_mib_per_s) return;
#define FIND(field, name) *(void **)&runtime.field = dlsym(RTLD_DEFAULT, name)
    FIND(stream_new, "cudaFakeStreamNew");
    FIND(copy, "cudaFakeCopyAsync");
    FIND(set, "cudaFakeSetAsync");
    FIND(call, "cudaFakeCallAsync");
    FIND(event_new, "cudaFakeEventNew");
    FIND(record, "cudaFakeEventRecord");
    FIND(wait, "cudaFakeStreamWait");
    FIND(done, "cudaFakeEventDone");
    FIND(event_sync, "cudaFakeEventSync");
    FIND(stream_sync, "cudaFakeStreamSync");
    FIND(sync_all, "cudaFakeSyncAll");
#undef FIND
    runtime_found = runtime.stream_new && runtime.copy && runtime.set && runtime.call && runtime.event_new && runtime.record && runtime.wait &&
                    runtime.done && runtime.event_sync && runtime.stream_sync && runtime.sync_all;
}
/* Whether the driver's streams are the runtime's. */
static int on_runtime_streams(void) {
    pthread_once(&runtime_once, find_runtime);
    return runtime_found;
}
static void *runtime_stream_new(void) { return runtime.stream_new(); }
/* Stream-ordered frees (memory.h), on the runtime's streams. */
static int ordered_frees(void) { return on_runtime_streams(); }
static int queue_after(void *stream, void (*fn)(void *), void *arg) { return runtime.call(stream, fn, arg) == OK; }
/* Called by the runtime's streams for each copy they run. */
void cudaFakeLinkCost(const void *dst, const void *src, size_t n) { link_cost((CUdeviceptr)dst, (CUdeviceptr)src, n); }

/* The driver's asynchronous copies run at once here, or, with
 * FAKE_CUDA_DEFER_COPIES, only at the next wait for a stream or the
 * context: work that does not wait for a copy then sees its destination
 * as it was before. Waits are logged, so that tests see which copies were
 * queued before them. */
#define MAX_DEFERRED 1024
static struct { void *dst; const void *src; size_t n; CUstream stream; int landed; } deferred[MAX_DEFERRED];
/* Copies held back so far, and landed so far: every one before
 * `deferred_landed` has, and some after it may have (a stream's copies land
 * when it is waited for). A ring of MAX_DEFERRED. */
static unsigned long deferred_queued, deferred_landed;
/* Lands the held-back copies among [deferred_landed, upto) that `one`
 * chooses (all, if it is NULL), in order. Called with `lock` held. */
static void land_locked(unsigned long upto, CUstream *one) {
    for (unsigned long k = deferred_landed; k < upto && k < deferred_queued; k++) {
        int i = k % MAX_DEFERRED;
        if (deferred[i].landed || (one && deferred[i].stream != *one)) continue;
        memcpy(deferred[i].dst, deferred[i].src, deferred[i].n);
        deferred[i].landed = 1;
    }
    while (deferred_landed < deferred_queued && deferred[deferred_landed % MAX_DEFERRED].landed) deferred_landed++;
}
/* Lands the held-back copies queued before the `upto`-th, in order. */
static void land_copies_upto(unsigned long upto) {
    if (on_runtime_streams()) runtime.sync_all();
    pthread_mutex_lock(&lock);
    land_locked(upto, NULL);
    pthread_mutex_unlock(&lock);
}
/* Whether every copy queued before the `upto`-th has landed. */
static int landed_before(unsigned long upto) {
    int all = 1;
    pthread_mutex_lock(&lock);
    for (unsigned long k = deferred_landed; k < upto && k < deferred_queued; k++)
        if (!deferred[k % MAX_DEFERRED].landed) all = 0;
    pthread_mutex_unlock(&lock);
    return all;
}
static void land_copies(void) { land_copies_upto((unsigned long)-1); }
/* For the fake runtime's cudaDeviceSynchronize, which on a GPU waits for
 * every stream of the context, the driver's too. */
void cudaFakeLandCopies(void) { land_copies(); }
/* A stream's own held-back copies land when it is waited for. */
CUresult cuStreamSynchronize(CUstream stream) {
    if (on_runtime_streams()) runtime.stream_sync(stream);
    pthread_mutex_lock(&lock);
    land_locked((unsigned long)-1, &stream);
    pthread_mutex_unlock(&lock);
    trace("cuStreamSynchronize stream=%p", (void *)stream);
    return OK;
}
CUresult cuCtxSynchronize(void) { land_copies(); trace("cuCtxSynchronize"); return OK; }
/* Events (other than on the runtime's streams, above): the driver's streams
 * here do their work as it is given, so an event is reached as soon as it
 * is recorded; with FAKE_CUDA_DEFER_COPIES,
 * waiting for it lands only the copies held back before its record (of
 * any stream: the held-back copies are one queue). */
#define DRIVER_EVENTS 1024
static char driver_events[DRIVER_EVENTS];
static unsigned long driver_event_marks[DRIVER_EVENTS];
static int driver_events_made;
CUresult cuEventCreate(void **event, unsigned flags) {
    if (!event) return INVALID_VALUE;
    if (on_runtime_streams()) return (*event = runtime.event_new()) ? OK : MEMORY_ALLOCATION;
    /* Made from several threads (the shim's mover among them). */
    *event = &driver_events[__atomic_fetch_add(&driver_events_made, 1, __ATOMIC_RELAXED) % DRIVER_EVENTS];
    return OK;
}
static unsigned long *mark_of(void *event) {
    char *e = event;
    return e >= driver_events && e < driver_events + DRIVER_EVENTS ? &driver_event_marks[e - driver_events] : NULL;
}
CUresult cuEventRecord(void *event, CUstream stream) {
    trace("cuEventRecord stream=%p", (void *)stream);
    if (!event) return INVALID_VALUE;
    if (on_runtime_streams()) return runtime.record(event, stream);
    unsigned long *mark = mark_of(event);
    pthread_mutex_lock(&lock);
    if (mark) *mark = deferred_queued;
    pthread_mutex_unlock(&lock);
    return OK;
}
CUresult cuEventRecord_ptsz(void *event, CUstream stream) { return cuEventRecord(event, stream); }
/* Reached once the copies held back before its record have landed. */
CUresult cuEventQuery(void *event) {
    if (!event) return INVALID_VALUE;
    if (on_runtime_streams()) return runtime.done(event) ? OK : 600;
    unsigned long *mark = mark_of(event);
    return !mark || landed_before(*mark) ? OK : 600; /* CUDA_ERROR_NOT_READY */
}
/* Waiting for an event lands the copies held back before its record. */
CUresult cuEventSynchronize(void *event) {
    if (!event) return INVALID_VALUE;
    if (on_runtime_streams()) {
        runtime.event_sync(event);
        return OK;
    }
    unsigned long *mark = mark_of(event);
    if (mark) land_copies_upto(*mark);
    else land_copies();
    trace("cuEventSynchronize");
    return OK;
}
/* The stream's later work is to see what came before the event: the copies
 * held back before its record land now, before any of it is given. */
CUresult cuStreamWaitEvent(CUstream stream, void *event, unsigned flags) {
    if (!event) return INVALID_VALUE;
    if (getenv("FAKE_CUDA_REFUSE_STREAM_WAITS")) {
        trace("cuStreamWaitEvent refused stream=%p", (void *)stream);
        return NOT_SUPPORTED;
    }
    if (on_runtime_streams()) return runtime.wait(stream, event);
    unsigned long *mark = mark_of(event);
    if (mark) land_copies_upto(*mark);
    trace("cuStreamWaitEvent stream=%p", (void *)stream);
    return OK;
}
CUresult cuStreamWaitEvent_ptsz(CUstream stream, void *event, unsigned flags) { return cuStreamWaitEvent(stream, event, flags); }
CUresult cuEventDestroy_v2(void *event) { return event ? OK : INVALID_VALUE; }

/* Ends the program, saying so, if a copy of the fake runtime's is queued or
 * running on [ptr, ptr + size): what cuMemUnmap checks first. */
static void no_copies_on(CUdeviceptr ptr, size_t size) {
    static int (*copies_using)(unsigned long long, unsigned long long);
    if (!copies_using) copies_using = (int (*)(unsigned long long, unsigned long long))dlsym(RTLD_DEFAULT, "cudaFakeCopiesUsing");
    int copying = copies_using ? copies_using(ptr, ptr + size) : 0;
    if (copying) {
        fprintf(stderr, "fake driver: cuMemUnmap(%#llx, %zu) under %d copies queued or running on the range\n", ptr, size, copying);
        abort();
    }
}
