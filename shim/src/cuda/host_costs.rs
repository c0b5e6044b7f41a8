//! What the shim's hooks cost the job's threads on the host: the time
//! inside each hooked call apart from the CUDA call it passes on, and of
//! it the CUDA calls the shim makes of its own (events, queries, remaps).
//! The moves' counters say what the spill tier's work took; these say
//! what every call pays, launches apart, so that a job whose device idles
//! while its host is slower to launch than native shows where that went.
//!
//! Counted only once the spill tier has blocks ([`count_from_now`]): a job
//! under no pressure pays no clock reads.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use vramshare_common::trace_json::{HostCallJson, MovesSample};

static COUNTING: AtomicBool = AtomicBool::new(false);

/// Calls and nanoseconds by name: the hooks' own time, and the shim's own
/// CUDA calls'. Taken with `try_lock` only: a count lost to a busy lock
/// costs nothing, a wait would cost the job (and a lock held by another
/// thread at a `fork` would never be let go in the child).
type Table = HashMap<&'static str, (u64, u64)>;
type ByName = Mutex<Option<Table>>;
static HOOKS_BY_NAME: ByName = Mutex::new(None);
static CUDA_BY_NAME: ByName = Mutex::new(None);

/// Both tables as they stood at the last two marks of a step, so that the
/// last complete step's calls can be told from the warm-up's.
type Tables = (Table, Table);
static AT_MARKS: Mutex<(Option<Tables>, Option<Tables>)> = Mutex::new((None, None));

fn add_by_name(table: &ByName, name: &'static str, ns: u64) {
    if let Ok(mut table) = table.try_lock() {
        let entry = table
            .get_or_insert_with(HashMap::new)
            .entry(name)
            .or_default();
        entry.0 += 1;
        entry.1 += ns;
    }
}

fn copy_of(table: &ByName) -> Option<Table> {
    let table = table.try_lock().ok()?;
    Some(table.clone().unwrap_or_default())
}

/// At the job's mark of a step: both tables as they stand, kept with the
/// ones of the mark before.
pub fn step_marked() {
    if !COUNTING.load(Relaxed) {
        return;
    }
    let (Some(hooks), Some(cuda)) = (copy_of(&HOOKS_BY_NAME), copy_of(&CUDA_BY_NAME)) else {
        return;
    };
    if let Ok(mut marks) = AT_MARKS.try_lock() {
        marks.0 = marks.1.take();
        marks.1 = Some((hooks, cuda));
    }
}

/// Rows of `kind` for `now`'s calls less `before`'s.
fn rows(kind: &str, now: &Table, before: Option<&Table>) -> Vec<HostCallJson> {
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
    let mut run = Vec::new();
    for (table, kind) in [(&HOOKS_BY_NAME, "hook"), (&CUDA_BY_NAME, "cuda")] {
        if let Some(now) = copy_of(table) {
            run.extend(rows(kind, &now, None));
        }
    }
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

/// This thread's CUDA time so far: the calls passed on, and the shim's
/// own (with their number).
#[derive(Clone, Copy, Default)]
struct Spent {
    passed_ns: u64,
    own_cuda_ns: u64,
    own_cuda_calls: u64,
}

thread_local! {
    static SPENT: Cell<Spent> = const { Cell::new(Spent { passed_ns: 0, own_cuda_ns: 0, own_cuda_calls: 0 }) };
    /// Inside a real CUDA call being timed: calls that CUDA makes back
    /// into the hooks meanwhile are a part of it, not timed again.
    static IN_CUDA: Cell<bool> = const { Cell::new(false) };
    /// Inside a hook being timed: the shim's own CUDA calls are the job
    /// thread's, counted by name (the shim's threads' are not).
    static IN_HOOK: Cell<u32> = const { Cell::new(0) };
}

/// From now on, hooked calls are timed.
pub fn count_from_now() {
    COUNTING.store(true, Relaxed);
}

/// A hooked call being timed: when it began, and its thread's CUDA time
/// then.
pub struct Hook(Instant, Spent);

/// At a hook's start: `None` unless calls are timed.
pub fn hook_began() -> Option<Hook> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    let spent = SPENT.try_with(Cell::get).ok()?;
    IN_HOOK.try_with(|depth| depth.set(depth.get() + 1)).ok()?;
    Some(Hook(Instant::now(), spent))
}

/// At the end of the hook `began` (of `name`: a launch, or another call):
/// its time in the shim is counted, and the thread's CUDA time put back as
/// it was, so that a hook that ran inside another's CUDA call (a library's
/// own launches) is not counted again as that call's.
pub fn hook_ended(began: Option<Hook>, name: &'static str) {
    let Some(Hook(at, before)) = began else {
        return;
    };
    // Every kernel launch's hook, and only those, has "Launch" in its name
    // (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaGraphLaunch`, …).
    let launch = name.contains("Launch");
    let whole = at.elapsed().as_nanos() as u64;
    let _ = IN_HOOK.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
    let Ok(now) = SPENT.try_with(|spent| spent.replace(before)) else {
        return;
    };
    let passed = now.passed_ns.saturating_sub(before.passed_ns);
    let kind = if launch {
        &HOST_COSTS.launches
    } else {
        &HOST_COSTS.others
    };
    let own = whole.saturating_sub(passed);
    add_by_name(&HOOKS_BY_NAME, name, own);
    kind.calls.fetch_add(1, Relaxed);
    kind.own_ns.fetch_add(own, Relaxed);
    kind.cuda_ns
        .fetch_add(now.own_cuda_ns.saturating_sub(before.own_cuda_ns), Relaxed);
    kind.cuda_calls.fetch_add(
        now.own_cuda_calls.saturating_sub(before.own_cuda_calls),
        Relaxed,
    );
}

/// Before a real CUDA call: when it began, unless calls are not timed or
/// it is made inside another.
pub fn cuda_began() -> Option<Instant> {
    if !COUNTING.load(Relaxed) {
        return None;
    }
    let outermost = IN_CUDA.try_with(|inside| !inside.replace(true)).ok()?;
    outermost.then(Instant::now)
}

/// After the real CUDA call `began`: counted as the one the hook passes
/// on (`passed`), or as the shim's own.
pub fn cuda_ended(began: Option<Instant>, name: &'static str, passed: bool) {
    let Some(at) = began else {
        return;
    };
    let spent = at.elapsed().as_nanos() as u64;
    let _ = IN_CUDA.try_with(|inside| inside.set(false));
    if !passed && IN_HOOK.try_with(Cell::get).unwrap_or(0) > 0 {
        add_by_name(&CUDA_BY_NAME, name, spent);
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

/// Adds the time `f` took to `counter`, where calls are timed.
pub fn timed<T>(counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
    if !COUNTING.load(Relaxed) {
        return f();
    }
    let began = Instant::now();
    let result = f();
    counter.fetch_add(began.elapsed().as_nanos() as u64, Relaxed);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_counts_its_own_time_and_its_own_cuda_calls_not_the_call_it_passes_on() {
        count_from_now();
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
        let named = |kind: &str| {
            by_name()
                .0
                .into_iter()
                .find(|c| c.kind == kind && c.name.starts_with("cu"))
        };
        assert_eq!(
            named("cuda").map(|c| c.name),
            Some("cuEventQuery".to_string())
        );
        assert_eq!(
            named("hook").map(|c| c.name),
            Some("cuLaunchKernel".to_string())
        );
    }
}
