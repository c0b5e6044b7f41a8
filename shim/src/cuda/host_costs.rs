//! What the shim's hooks cost the job's threads on the host: the time
//! inside each hooked call apart from the CUDA call it passes on, and of
//! it the CUDA calls the shim makes of its own (events, queries, remaps).
//! The moves' counters say what the spill tier's work took; these say
//! what every call pays, launches apart, so that a job whose device idles
//! while its host is slower to launch than native shows where that went.
//!
//! Counted only once the spill tier has blocks ([`count_from_now`]): a job
//! under no pressure pays nothing for them. Every call is counted; one
//! hooked call in [`TIME_ONE_IN`], chosen at random on each thread, is
//! timed (with the CUDA calls inside it), and its times count that many
//! times over: an estimate with no bias, where timing every call took
//! more clock reads than the hooks' own work (half of what a stream-ordered
//! allocation and free added on the fake runtime).

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use vramshare_common::trace_json::{HostCallJson, MovesSample};

use super::costs_by_name::{ByName, Counts};

static COUNTING: AtomicBool = AtomicBool::new(false);

/// One hooked call in this many is timed, at random.
pub const TIME_ONE_IN: u64 = 8;

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
        .filter_map(|(name, &(calls, ns))| {
            let (calls_then, ns_then) = before
                .and_then(|b| b.get(name))
                .copied()
                .unwrap_or_default();
            (calls > calls_then).then(|| HostCallJson {
                name: name.to_string(),
                kind: kind.to_string(),
                calls: calls - calls_then,
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
    /// Hooked calls timed.
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
    /// into the hooks meanwhile are a part of it, not counted again.
    static IN_CUDA: Cell<bool> = const { Cell::new(false) };
    /// Inside a hook being counted: the shim's own CUDA calls are the job
    /// thread's, counted by name (the shim's threads' are not).
    static IN_HOOK: Cell<u32> = const { Cell::new(0) };
    /// Whether the innermost hook being counted is timed.
    static TIMING: Cell<bool> = const { Cell::new(false) };
    /// The thread's draws of which calls are timed (xorshift; 0 until
    /// seeded), and one in how many are (the tests time every call).
    static DRAWS: Cell<u64> = const { Cell::new(0) };
    static ONE_IN: Cell<u64> = const { Cell::new(TIME_ONE_IN) };
}

/// Whether the hook beginning now is timed: one in [`ONE_IN`], at random.
fn drawn() -> bool {
    let one_in = ONE_IN.try_with(Cell::get).unwrap_or(TIME_ONE_IN);
    DRAWS
        .try_with(|draws| {
            let mut x = draws.get();
            if x == 0 {
                // Seeded from the process's random keys: threads draw
                // apart, and a seed is never 0.
                x = RandomState::new().hash_one(draws as *const Cell<u64>) | 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            draws.set(x);
            x % one_in == 0
        })
        .unwrap_or(false)
}

/// What a timed time counts for: [`ONE_IN`] times itself.
fn weighted(ns: u64) -> u64 {
    ns.saturating_mul(ONE_IN.try_with(Cell::get).unwrap_or(TIME_ONE_IN))
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

/// A hooked call being counted: when it began, if it is timed; its
/// thread's CUDA time then; and whether the hook it runs inside is timed.
pub struct Hook {
    at: Option<Instant>,
    spent: Spent,
    outer_timed: bool,
}

/// At a hook's start: `None` unless calls are counted.
#[inline]
pub fn hook_began() -> Option<Hook> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    counted_hook_began()
}

/// [`hook_began`] while calls are counted: out of line, as the others
/// below, so that a job whose calls are not counted skips their code.
#[inline(never)]
fn counted_hook_began() -> Option<Hook> {
    let spent = SPENT.try_with(Cell::get).ok()?;
    IN_HOOK.try_with(|depth| depth.set(depth.get() + 1)).ok()?;
    let timed = drawn();
    let outer_timed = TIMING
        .try_with(|timing| timing.replace(timed))
        .unwrap_or(false);
    Some(Hook {
        at: timed.then(Instant::now),
        spent,
        outer_timed,
    })
}

/// At the end of the hook `began` (of `name`: a launch, or another call):
/// it is counted, with its time in the shim if it was timed, and the
/// thread's CUDA time put back as it was, so that a hook that ran inside
/// another's CUDA call (a library's own launches) is not counted again as
/// that call's.
#[inline]
pub fn hook_ended(began: Option<Hook>, name: &'static str) {
    if let Some(hook) = began {
        counted_hook_ended(hook, name);
    }
}

#[inline(never)]
fn counted_hook_ended(hook: Hook, name: &'static str) {
    let whole = hook.at.map(|at| at.elapsed().as_nanos() as u64);
    let _ = IN_HOOK.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
    let _ = TIMING.try_with(|timing| timing.set(hook.outer_timed));
    let before = hook.spent;
    let Ok(now) = SPENT.try_with(|spent| spent.replace(before)) else {
        return;
    };
    // Every kernel launch's hook, and only those, has "Launch" in its name
    // (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaGraphLaunch`, …).
    let kind = if name.contains("Launch") {
        &HOST_COSTS.launches
    } else {
        &HOST_COSTS.others
    };
    kind.calls.fetch_add(1, Relaxed);
    kind.cuda_calls.fetch_add(
        now.own_cuda_calls.saturating_sub(before.own_cuda_calls),
        Relaxed,
    );
    let Some(whole) = whole else {
        HOOKS_BY_NAME.add(name, 0);
        return;
    };
    let passed = now.passed_ns.saturating_sub(before.passed_ns);
    let own = weighted(whole.saturating_sub(passed));
    HOOKS_BY_NAME.add(name, own);
    kind.own_ns.fetch_add(own, Relaxed);
    let own_cuda = now.own_cuda_ns.saturating_sub(before.own_cuda_ns);
    kind.cuda_ns.fetch_add(weighted(own_cuda), Relaxed);
}

/// A real CUDA call being counted: when it began, if it is timed.
pub struct CudaCall(Option<Instant>);

/// Before a real CUDA call: `None` unless calls are counted and it is not
/// made inside another.
#[inline]
pub fn cuda_began() -> Option<CudaCall> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    counted_cuda_began()
}

#[inline(never)]
fn counted_cuda_began() -> Option<CudaCall> {
    let outermost = IN_CUDA.try_with(|inside| !inside.replace(true)).ok()?;
    if !outermost {
        return None;
    }
    let timed = TIMING.try_with(Cell::get).unwrap_or(false);
    Some(CudaCall(timed.then(Instant::now)))
}

/// After the real CUDA call `began`: counted as the one the hook passes
/// on (`passed`), or as the shim's own.
#[inline]
pub fn cuda_ended(began: Option<CudaCall>, name: &'static str, passed: bool) {
    if let Some(CudaCall(at)) = began {
        counted_cuda_ended(at, name, passed);
    }
}

#[inline(never)]
fn counted_cuda_ended(at: Option<Instant>, name: &'static str, passed: bool) {
    let spent = at.map_or(0, |at| at.elapsed().as_nanos() as u64);
    let _ = IN_CUDA.try_with(|inside| inside.set(false));
    if !passed && IN_HOOK.try_with(Cell::get).unwrap_or(0) > 0 {
        CUDA_BY_NAME.add(name, weighted(spent));
    }
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
    if !COUNTING.load(Relaxed) || !TIMING.try_with(Cell::get).unwrap_or(false) {
        return f();
    }
    let began = Instant::now();
    let result = f();
    counter.fetch_add(weighted(began.elapsed().as_nanos() as u64), Relaxed);
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
        let hook = hook_began();
        let own = cuda_began();
        std::thread::sleep(std::time::Duration::from_millis(2));
        cuda_ended(own, "cuEventQuery", false);
        let passed = cuda_began();
        // A call CUDA makes back into the hooks inside it: not timed again.
        assert!(cuda_began().is_none());
        std::thread::sleep(std::time::Duration::from_millis(30));
        cuda_ended(passed, "cuLaunchKernel", true);
        hook_ended(hook, "cuLaunchKernel");
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
    fn every_call_is_counted_and_one_in_eight_timed() {
        count_from_now();
        for _ in 0..2000 {
            let hook = hook_began();
            hook_ended(hook, "cudaMallocAsync-sampled");
        }
        let (run, _) = by_name();
        let row = run
            .iter()
            .find(|c| c.name == "cudaMallocAsync-sampled")
            .expect("counted");
        assert_eq!(row.calls, 2000, "every call counted");
        assert!(row.seconds > 0.0, "some were timed");
        // The draws: one in eight, at random (80,000 draws: 10,000 expected,
        // a standard deviation of 94).
        let timed = (0..80_000).filter(|_| drawn()).count();
        assert!((9_000..11_000).contains(&timed), "{timed} of 80,000 drawn");
    }
}
