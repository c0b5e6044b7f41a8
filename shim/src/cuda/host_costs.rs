//! What the shim's hooks cost the job's threads on the host: the time
//! inside each hooked call apart from the CUDA call it passes on, and of
//! it the CUDA calls the shim makes of its own (events, queries, remaps).
//! The moves' counters say what the spill tier's work took; these say
//! what every call pays, launches apart, so that a job whose device idles
//! while its host is slower to launch than native shows where that went.
//!
//! Counted only once the spill tier has blocks ([`count_from_now`]): a job
//! under no pressure pays nothing for them. Every call is counted. The
//! calls a step makes hundreds of (kernel launches, stream-ordered
//! allocations and frees) are timed one in [`TIME_ONE_IN`], drawn at random
//! on each thread, with the CUDA calls inside them, and their times count
//! that many times over; timing each of them took more clock reads than
//! their hooks' own work (half of what a stream-ordered allocation and free
//! added on the fake runtime). Their times are estimates, a little high (a
//! timed call also pays for its own clock reads); every other call is timed
//! each time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use vramshare_common::trace_json::{HostCallJson, MovesSample};

use super::costs_by_name::{ByName, Counts};

static COUNTING: AtomicBool = AtomicBool::new(false);

/// One launch, stream-ordered allocation or free in this many is timed,
/// at random.
pub const TIME_ONE_IN: u64 = 8;

/// What a hook's name says of it ([`hook_kind`]).
const LAUNCH: u8 = 1;
const SAMPLED: u8 = 2;

/// Every kernel launch's hook, and only those, has "Launch" in its name
/// (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaGraphLaunch`, …); those and
/// the stream-ordered allocations and frees (`cudaMallocAsync`,
/// `cuMemAllocFromPoolAsync`, `cudaFreeAsync`, …) are sampled.
fn hook_kind(name: &str) -> u8 {
    let launch = name.contains("Launch");
    let ordered = name.contains("Async")
        && (name.contains("Malloc") || name.contains("MemAlloc") || name.contains("Free"));
    (if launch { LAUNCH } else { 0 }) | (if launch || ordered { SAMPLED } else { 0 })
}

/// Calls and nanoseconds by name: the hooks' own time, and the shim's
/// own CUDA calls'.
static HOOKS_BY_NAME: ByName = ByName::new();
static CUDA_BY_NAME: ByName = ByName::new();

/// Both tables as they stood at the last two marks of a step, so that the
/// last complete step's calls can be told from the warm-up's. Taken with
/// `try_lock` only, once a step.
type Tables = (Counts, Counts);
static AT_MARKS: Mutex<(Option<Tables>, Option<Tables>)> = Mutex::new((None, None));

/// At the job's mark of a step: both tables as they stand, kept with the
/// ones of the mark before.
pub fn step_marked() {
    if !COUNTING.load(Relaxed) {
        return;
    }
    let tables = (HOOKS_BY_NAME.counts(), CUDA_BY_NAME.counts());
    if let Ok(mut marks) = AT_MARKS.try_lock() {
        marks.0 = marks.1.take();
        marks.1 = Some(tables);
    }
}

/// Rows of `kind` for `now`'s calls less `before`'s.
fn rows(kind: &str, now: &Counts, before: Option<&Counts>) -> Vec<HostCallJson> {
    now.iter()
        .filter_map(|(name, &(calls, timed, ns))| {
            let (calls_then, timed_then, ns_then) = before
                .and_then(|b| b.get(name))
                .copied()
                .unwrap_or_default();
            (calls > calls_then).then(|| HostCallJson {
                name: name.to_string(),
                kind: kind.to_string(),
                calls: calls - calls_then,
                timed_calls: timed.saturating_sub(timed_then),
                seconds: ns.saturating_sub(ns_then) as f64 / 1e9,
            })
        })
        .collect()
}

/// The hooks' own time and the job's threads' own CUDA calls inside them,
/// by name, the costliest first: over the whole run, and over the last
/// complete step the job marked (empty before two marks).
pub fn by_name() -> (Vec<HostCallJson>, Vec<HostCallJson>) {
    let costliest_first = |mut all: Vec<HostCallJson>| {
        all.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        all
    };
    let mut run = rows("hook", &HOOKS_BY_NAME.counts(), None);
    run.extend(rows("cuda", &CUDA_BY_NAME.counts(), None));
    let mut step = Vec::new();
    if let Ok(marks) = AT_MARKS.try_lock() {
        if let (Some(before), Some(after)) = (&marks.0, &marks.1) {
            step.extend(rows("hook", &after.0, Some(&before.0)));
            step.extend(rows("cuda", &after.1, Some(&before.1)));
        }
    }
    (costliest_first(run), costliest_first(step))
}

/// Counts for one kind of hooked call.
pub struct Calls {
    /// Hooked calls, every one.
    pub calls: AtomicU64,
    /// Their time in the shim: the whole call less the CUDA call passed on.
    pub own_ns: AtomicU64,
    /// Of `own_ns`: the CUDA calls the shim made itself, and their number.
    pub cuda_ns: AtomicU64,
    pub cuda_calls: AtomicU64,
}

/// The process's counts.
pub struct HostCosts {
    /// Kernel launches (of every form, graphs' included).
    pub launches: Calls,
    /// Every other hooked call.
    pub others: Calls,
    /// Of the hooks' own time: reading launches' parameters and naming
    /// their blocks; moving the blocks that launches, library calls and
    /// copies name (the step's record, and claiming blocks from the mover,
    /// included); bringing blocks ahead after them.
    pub read_ns: AtomicU64,
    pub fetch_ns: AtomicU64,
    pub ahead_ns: AtomicU64,
}

pub static HOST_COSTS: HostCosts = HostCosts {
    launches: Calls::new(),
    others: Calls::new(),
    read_ns: AtomicU64::new(0),
    fetch_ns: AtomicU64::new(0),
    ahead_ns: AtomicU64::new(0),
};

impl Calls {
    const fn new() -> Calls {
        Calls {
            calls: AtomicU64::new(0),
            own_ns: AtomicU64::new(0),
            cuda_ns: AtomicU64::new(0),
            cuda_calls: AtomicU64::new(0),
        }
    }
}

/// This thread's CUDA time so far (in its timed calls), and its own CUDA
/// calls (all of them).
#[derive(Clone, Copy, Default)]
struct Spent {
    passed_ns: u64,
    own_cuda_ns: u64,
    own_cuda_calls: u64,
}

thread_local! {
    static SPENT: Cell<Spent> = const { Cell::new(Spent { passed_ns: 0, own_cuda_ns: 0, own_cuda_calls: 0 }) };
    /// Inside a real CUDA call being counted: calls that CUDA makes back
    /// into the hooks meanwhile are a part of it, not counted again (bar
    /// their own hooks' real twins).
    static IN_CUDA: Cell<bool> = const { Cell::new(false) };
    /// Inside a hook being counted: the shim's own CUDA calls are the job
    /// thread's, counted by name (the shim's threads' are not).
    static IN_HOOK: Cell<u32> = const { Cell::new(0) };
    /// What the innermost hook's times count for: 0 if it is not timed, 1
    /// if every call of it is, [`TIME_ONE_IN`] if it was drawn.
    static WEIGHT: Cell<u64> = const { Cell::new(0) };
    /// The thread's draws (xorshift; 0 until seeded), and one in how many
    /// are timed (the tests time every call).
    static DRAWS: Cell<u64> = const { Cell::new(0) };
    static ONE_IN: Cell<u64> = const { Cell::new(TIME_ONE_IN) };
}

/// Threads' seeds, each from the one before: threads draw apart, with no
/// call that could fail (the OS's random bytes) in a hook.
static SEEDS: AtomicU64 = AtomicU64::new(0);

/// A thread's first draw: splitmix64 of the next seed; never 0.
fn seed() -> u64 {
    let mut z = SEEDS
        .fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

/// What a sampled hook beginning now counts for: [`ONE_IN`] if it is
/// drawn to be timed (one in that many, at random), else 0.
fn drawn() -> u64 {
    let one_in = ONE_IN.try_with(Cell::get).unwrap_or(TIME_ONE_IN);
    DRAWS
        .try_with(|draws| {
            let mut x = draws.get();
            if x == 0 {
                x = seed();
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            draws.set(x);
            if x % one_in == 0 {
                one_in
            } else {
                0
            }
        })
        .unwrap_or(0)
}

/// Has this thread time every hooked call (the tests' exact times).
#[cfg(test)]
pub fn time_every_call() {
    ONE_IN.with(|one_in| one_in.set(1));
}

/// From now on, hooked calls are counted.
pub fn count_from_now() {
    COUNTING.store(true, Relaxed);
}

/// A hooked call being counted: its name's row, whether it is a launch,
/// when it began and what its times count for (if it is timed), its
/// thread's CUDA time then, and the weight of the hook it runs inside.
pub struct Hook {
    row: Option<&'static super::costs_by_name::Row>,
    launch: bool,
    at: Option<Instant>,
    weight: u64,
    spent: Spent,
    outer_weight: u64,
}

/// At the start of the hook of `name`: `None` unless calls are counted.
#[inline]
pub fn hook_began(name: &'static str) -> Option<Hook> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    counted_hook_began(name)
}

/// [`hook_began`] while calls are counted: out of line, as the others
/// below, so that a job whose calls are not counted skips their code.
#[inline(never)]
fn counted_hook_began(name: &'static str) -> Option<Hook> {
    let row = HOOKS_BY_NAME.row(name, hook_kind);
    let kind = row.map_or_else(|| hook_kind(name), |row| row.kind(name, hook_kind));
    let spent = SPENT.try_with(Cell::get).ok()?;
    IN_HOOK.try_with(|depth| depth.set(depth.get() + 1)).ok()?;
    let weight = if kind & SAMPLED == 0 { 1 } else { drawn() };
    let outer_weight = WEIGHT.try_with(|w| w.replace(weight)).unwrap_or(0);
    Some(Hook {
        row,
        launch: kind & LAUNCH != 0,
        at: (weight > 0).then(Instant::now),
        weight,
        spent,
        outer_weight,
    })
}

/// At the end of the hook `began`: it is counted, with its time in the
/// shim if it was timed, and the thread's CUDA time put back as it was,
/// so that a hook that ran inside another's CUDA call (a library's own
/// launches) is not counted again as that call's.
#[inline]
pub fn hook_ended(began: Option<Hook>) {
    if let Some(hook) = began {
        counted_hook_ended(hook);
    }
}

#[inline(never)]
fn counted_hook_ended(hook: Hook) {
    let whole = hook.at.map(|at| at.elapsed().as_nanos() as u64);
    let _ = IN_HOOK.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
    let _ = WEIGHT.try_with(|w| w.set(hook.outer_weight));
    let before = hook.spent;
    let Ok(now) = SPENT.try_with(|spent| spent.replace(before)) else {
        return;
    };
    let kind = if hook.launch {
        &HOST_COSTS.launches
    } else {
        &HOST_COSTS.others
    };
    kind.calls.fetch_add(1, Relaxed);
    let own_cuda_calls = now.own_cuda_calls.saturating_sub(before.own_cuda_calls);
    if own_cuda_calls > 0 {
        kind.cuda_calls.fetch_add(own_cuda_calls, Relaxed);
    }
    let passed = now.passed_ns.saturating_sub(before.passed_ns);
    let own = whole.map(|whole| whole.saturating_sub(passed).saturating_mul(hook.weight));
    if let Some(row) = hook.row {
        row.add(own);
    }
    if let Some(own) = own {
        kind.own_ns.fetch_add(own, Relaxed);
        let own_cuda = now.own_cuda_ns.saturating_sub(before.own_cuda_ns);
        kind.cuda_ns
            .fetch_add(own_cuda.saturating_mul(hook.weight), Relaxed);
    }
}

/// A real CUDA call being counted: when it began, if it is timed, and
/// whether it was made inside another.
pub struct CudaCall {
    at: Option<Instant>,
    inside: bool,
}

/// Before a real CUDA call (`passed`: the one the running hook passes on):
/// `None` unless calls are counted, or if it is the shim's own call made
/// inside another CUDA call. A hook's own real call made inside another's
/// (a library's launches, inside its call) is its hook's to count.
#[inline]
pub fn cuda_began(passed: bool) -> Option<CudaCall> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    counted_cuda_began(passed)
}

#[inline(never)]
fn counted_cuda_began(passed: bool) -> Option<CudaCall> {
    let inside = IN_CUDA.try_with(|inside| inside.replace(true)).ok()?;
    if inside && !passed {
        return None;
    }
    let timed = WEIGHT.try_with(Cell::get).unwrap_or(0) > 0;
    Some(CudaCall {
        at: timed.then(Instant::now),
        inside,
    })
}

/// After the real CUDA call `began`: counted as the one the hook passes
/// on (`passed`), or as the shim's own.
#[inline]
pub fn cuda_ended(began: Option<CudaCall>, name: &'static str, passed: bool) {
    if let Some(call) = began {
        counted_cuda_ended(call, name, passed);
    }
}

#[inline(never)]
fn counted_cuda_ended(call: CudaCall, name: &'static str, passed: bool) {
    let spent = call.at.map(|at| at.elapsed().as_nanos() as u64);
    let _ = IN_CUDA.try_with(|inside| inside.set(call.inside));
    if !passed && IN_HOOK.try_with(Cell::get).unwrap_or(0) > 0 {
        let weight = WEIGHT.try_with(Cell::get).unwrap_or(0);
        CUDA_BY_NAME.add(name, spent.map(|ns| ns.saturating_mul(weight)));
    }
    let spent = spent.unwrap_or(0);
    let _ = SPENT.try_with(|all| {
        let mut now = all.get();
        if passed {
            now.passed_ns += spent;
        } else {
            now.own_cuda_ns += spent;
            now.own_cuda_calls += 1;
        }
        all.set(now);
    });
}

/// The counts so far, as the tier's samples hold them.
pub fn sample() -> MovesSample {
    let (launches, others) = (&HOST_COSTS.launches, &HOST_COSTS.others);
    MovesSample {
        launch_hooks: launches.calls.load(Relaxed),
        launch_hooks_ns: launches.own_ns.load(Relaxed),
        launch_hooks_cuda_ns: launches.cuda_ns.load(Relaxed),
        launch_hooks_cuda_calls: launches.cuda_calls.load(Relaxed),
        launch_read_ns: HOST_COSTS.read_ns.load(Relaxed),
        launch_fetch_ns: HOST_COSTS.fetch_ns.load(Relaxed),
        launch_ahead_ns: HOST_COSTS.ahead_ns.load(Relaxed),
        other_hooks: others.calls.load(Relaxed),
        other_hooks_ns: others.own_ns.load(Relaxed),
        other_hooks_cuda_ns: others.cuda_ns.load(Relaxed),
        other_hooks_cuda_calls: others.cuda_calls.load(Relaxed),
        ..MovesSample::default()
    }
}

/// Adds the time `f` took to `counter`, inside a timed hook.
pub fn timed<T>(counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
    if !COUNTING.load(Relaxed) {
        return f();
    }
    let weight = WEIGHT.try_with(Cell::get).unwrap_or(0);
    if weight == 0 {
        return f();
    }
    let began = Instant::now();
    let result = f();
    let spent = began.elapsed().as_nanos() as u64;
    counter.fetch_add(spent.saturating_mul(weight), Relaxed);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_counts_its_own_time_and_its_own_cuda_calls_not_the_call_it_passes_on() {
        count_from_now();
        time_every_call();
        // Launches: no other unit test makes one.
        let counts = &HOST_COSTS.launches;
        let before = (
            counts.calls.load(Relaxed),
            counts.cuda_calls.load(Relaxed),
            counts.own_ns.load(Relaxed),
        );
        let hook = hook_began("cuLaunchKernel");
        let own = cuda_began(false);
        std::thread::sleep(std::time::Duration::from_millis(2));
        cuda_ended(own, "cuEventQuery", false);
        let passed = cuda_began(true);
        // A call CUDA makes back into the hooks inside it: not counted
        // again, unless it is a hook's own real call.
        assert!(cuda_began(false).is_none());
        std::thread::sleep(std::time::Duration::from_millis(30));
        cuda_ended(passed, "cuLaunchKernel", true);
        hook_ended(hook);
        assert_eq!(counts.calls.load(Relaxed), before.0 + 1);
        assert_eq!(counts.cuda_calls.load(Relaxed), before.1 + 1);
        let own_ns = counts.own_ns.load(Relaxed) - before.2;
        assert!(
            (2_000_000..30_000_000).contains(&own_ns),
            "own time {own_ns} ns: the 2 ms own call, not the 30 ms passed on"
        );
        assert_eq!(SPENT.with(Cell::get).passed_ns, 0, "put back as it was");
        let (run, _) = by_name();
        let named = |kind: &str, name: &str| run.iter().any(|c| c.kind == kind && c.name == name);
        assert!(
            named("cuda", "cuEventQuery"),
            "the shim's own call, by name"
        );
        assert!(named("hook", "cuLaunchKernel"), "the hook, by name");
        assert!(
            !named("cuda", "cuLaunchKernel"),
            "the call passed on is the hook's"
        );
    }

    #[test]
    fn a_hook_inside_another_hooks_call_has_its_own_call_passed_on() {
        count_from_now();
        time_every_call();
        let outer = hook_began("cublasGemmEx");
        let library = cuda_began(true);
        // The library's own work, through its hook, inside its call (a
        // memset here: the launches' counts are the test above's).
        let inner = hook_began("cudaMemsetAsync");
        let launch = cuda_began(true);
        std::thread::sleep(std::time::Duration::from_millis(20));
        cuda_ended(launch, "cudaMemsetAsync", true);
        hook_ended(inner);
        assert!(IN_CUDA.with(Cell::get), "still inside the library's call");
        cuda_ended(library, "cublasGemmEx", true);
        hook_ended(outer);
        let (run, _) = by_name();
        let own = |name: &str| run.iter().find(|c| c.name == name).map(|c| c.seconds);
        let inner_own = own("cudaMemsetAsync").expect("counted");
        assert!(
            inner_own < 0.015,
            "the memset's 20 ms passed on, not its hook's: {inner_own}"
        );
        let outer_own = own("cublasGemmEx").expect("counted");
        assert!(
            outer_own < 0.015,
            "the library's call passed on, not its hook's: {outer_own}"
        );
    }

    #[test]
    fn launches_and_stream_ordered_allocations_are_sampled_other_calls_timed_each_time() {
        count_from_now();
        for _ in 0..2000 {
            hook_ended(hook_began("cudaMallocAsync"));
            hook_ended(hook_began("cudaStreamSynchronize"));
        }
        let (run, _) = by_name();
        let row = |name: &str| {
            run.iter()
                .find(|c| c.name == name)
                .expect("counted")
                .clone()
        };
        let sampled = row("cudaMallocAsync");
        assert_eq!(sampled.calls, 2000, "every call counted");
        // 2,000 draws of one in eight: 250 expected, a standard deviation
        // of 15.
        assert!(
            (150..350).contains(&sampled.timed_calls),
            "{}",
            sampled.timed_calls
        );
        let each = row("cudaStreamSynchronize");
        assert_eq!((each.calls, each.timed_calls), (2000, 2000));
        assert_eq!(hook_kind("cuLaunchKernelEx"), LAUNCH | SAMPLED);
        assert_eq!(hook_kind("cuMemFreeAsync_ptsz"), SAMPLED);
        assert_eq!(hook_kind("cudaMemcpyAsync"), 0);
    }

    #[test]
    fn a_drawn_call_counts_eight_times_over() {
        count_from_now();
        let hook = loop {
            let hook = hook_began("cuMemAllocAsync");
            if hook.as_ref().is_some_and(|hook| hook.at.is_some()) {
                break hook;
            }
            hook_ended(hook);
        };
        assert_eq!(hook.as_ref().map(|hook| hook.weight), Some(TIME_ONE_IN));
        std::thread::sleep(std::time::Duration::from_millis(2));
        hook_ended(hook);
        let (run, _) = by_name();
        let row = run
            .iter()
            .find(|c| c.name == "cuMemAllocAsync")
            .expect("counted");
        assert_eq!(row.timed_calls, 1);
        assert!(
            row.seconds >= 0.016,
            "2 ms counted eight times: {}",
            row.seconds
        );
    }
}
