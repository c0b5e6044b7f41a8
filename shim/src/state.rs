//! The process's state: configuration, ledger, trace and per-device caches.
//!
//! The configuration is read when the library is loaded (so that a malformed
//! variable stops the job before it starts); everything else is made on the
//! first hooked call, so a process that never calls CUDA pays nothing more.
//! After `fork` the child gets a fresh state of its own: it is a new process
//! with its own quota, and whatever locks the parent's other threads held at
//! the moment of the fork stay behind in the parent's copy, never touched.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use memmap2::MmapMut;
use vramshare_common::event::{Api, Event, Op, Placement};
use vramshare_common::files::Mapped;
use vramshare_common::files::{default_dir, open_or_replace, FileError};
use vramshare_common::pool::{JoinError, PoolFile, PoolSlot, Pools};
use vramshare_common::process::{self, monotonic_ns};
use vramshare_common::registry::{local_counters, ProcessSlot, Registry, RegistryFile};
use vramshare_common::ring::{Ring, RingFile};

use crate::config::{Config, Spill, MAX_DEVICES};
use crate::ledger::Ledger;
use crate::trace::{thread_id, TraceLog};

pub struct State {
    pub pid: u32,
    pub ledger: Ledger,
    /// The process's own copy of its events, kept only when
    /// `VRAMSHARE_TRACE` asks for them at exit.
    pub trace: Option<TraceLog>,
    /// The shared trace ring, when it can be used.
    ring: Option<Ring<Mapped<MmapMut>>>,
    /// This process's slot in the shared registry (given back at exit).
    slot: Option<&'static ProcessSlot>,
    /// The pool this process shares a budget with, and its index.
    pub pool: Option<(u32, &'static PoolSlot)>,
    /// The shared registry, where dead members of the pool are found.
    pub registry: Option<&'static Registry<Mapped<MmapMut>>>,
    /// Per device: `QUOTA_UNRESOLVED` until the process's own quota for it
    /// is resolved into the registry slot (whose value the policy reads),
    /// then `QUOTA_RESOLVED`.
    quotas: Vec<AtomicU64>,
    /// Per device, the quota the shim last acted on: what it resolved, then
    /// each change the watcher applied ([`crate::watcher`]).
    pub applied_quota: Vec<AtomicU64>,
    /// The shim's own non-blocking stream per device, made on first promotion.
    pub streams: Vec<AtomicPtr<c_void>>,
    /// The same for blocks allocated through the driver API.
    pub driver_streams: Vec<AtomicPtr<c_void>>,
    /// The runtime's major version (12, 13), 0 until asked.
    pub runtime_major: AtomicI32,
    pub runtime_version: AtomicI32,
    /// Per stream-ordered pool, the slack last counted (see [`crate::stream_pools`]).
    pub pool_slack:
        std::sync::Mutex<std::collections::HashMap<usize, crate::stream_pools::Counted>>,
    /// Set once the process's device count is known ([`State::learn_device_count`]).
    devices_learned: std::sync::Once,
}

pub const QUOTA_UNRESOLVED: u64 = u64::MAX;
pub const QUOTA_RESOLVED: u64 = 0;

static CONFIG: OnceLock<Config> = OnceLock::new();
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
static PROCESS_HOOKS: std::sync::Once = std::sync::Once::new();

/// Reads and checks the variables; on a malformed one, says so and exits 2.
pub fn load_config() -> &'static Config {
    CONFIG.get_or_init(|| match Config::from_env().and_then(check_trace_target) {
        Ok(config) => config,
        Err(error) => {
            let line = format!("{error}\n");
            // SAFETY: write to stderr, then leave before the job runs.
            unsafe {
                libc::write(2, line.as_ptr().cast(), line.len());
                libc::_exit(2);
            }
        }
    })
}

/// A trace target that cannot take the trace is refused as a malformed
/// value is ([`crate::report::check_target`]).
fn check_trace_target(config: Config) -> Result<Config, crate::config::ConfigError> {
    if let Some(template) = &config.trace {
        // The system call, not libc's getpid: a job's own getpid wrapper
        // (an interposer of its own) should see only the job's calls.
        // SAFETY: SYS_getpid takes no arguments and cannot fail.
        let pid = unsafe { libc::syscall(libc::SYS_getpid) } as u32;
        let path = crate::report::trace_path(template, pid);
        if let Err(reason) = crate::report::check_target(&path) {
            return Err(crate::config::ConfigError {
                variable: "VRAMSHARE_TRACE",
                value: template.clone(),
                reason,
                forms: crate::report::TRACE_FORMS,
            });
        }
    }
    Ok(config)
}

pub fn config() -> &'static Config {
    load_config()
}

/// Set while one thread makes the state: the others wait for it, so that
/// the shared files are opened and the registry slot claimed once.
static MAKING: AtomicBool = AtomicBool::new(false);

/// The state, made on first use.
pub fn state() -> &'static State {
    loop {
        let current = STATE.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: states are leaked, never freed.
            return unsafe { &*current };
        }
        if MAKING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            std::thread::yield_now();
            continue;
        }
        // Let the others in again even if making the state panics.
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                MAKING.store(false, Ordering::Release);
            }
        }
        let _done = Done;
        if STATE.load(Ordering::Acquire).is_null() {
            let fresh = Box::into_raw(Box::new(State::new()));
            STATE.store(fresh, Ordering::Release);
            PROCESS_HOOKS.call_once(install_process_hooks);
        }
    }
}

/// Whether this process has called CUDA through the shim (and so has a trace).
pub fn started() -> Option<&'static State> {
    let current = STATE.load(Ordering::Acquire);
    // SAFETY: states are leaked, never freed.
    (!current.is_null()).then(|| unsafe { &*current })
}

extern "C" fn after_fork_in_child() {
    // The parent's state is left as it is (it may hold locks of threads that
    // do not exist here); the child starts empty on its next CUDA call.
    STATE.store(std::ptr::null_mut(), Ordering::Release);
    // A thread of the parent may have been making it: not here.
    MAKING.store(false, Ordering::Release);
}

extern "C" fn at_exit() {
    crate::watcher::EXITING.store(true, Ordering::Release);
    if let Some(state) = started() {
        crate::report::write_trace_at_exit(state);
        // Given back once: a member that wrongly found this process dead
        // has taken it out of the pool already.
        let Some(slot) = state.slot.filter(|slot| slot.release()) else {
            return;
        };
        let Some((index, pool)) = state.pool else {
            return;
        };
        // What the process still holds stops counting in its pool; members
        // that died are taken out too, and if none is left the pool holds
        // nothing. Its own place goes last, so that the last one out frees
        // the slot only when nothing more is done to it.
        take_bytes_out(slot, pool);
        if let Some(registry) = state.registry {
            registry.reap_dead(index, |dead| reap(dead, Some((index, pool))));
            clear_if_empty(registry, index, pool, None);
        }
        leave_pool(index, pool);
    }
}

fn install_process_hooks() {
    // SAFETY: registering plain extern "C" functions that never unwind.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        libc::atexit(at_exit);
    }
    // A panic inside the shim is reported through the shim's log, once, in
    // one line; `guard::hooked` then passes the call through.
    std::panic::set_hook(Box::new(|info| error!("{info}")));
}

impl Default for State {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    pub fn new() -> State {
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() } as u32;
        let (ring, slot, pool) = match open_shared(pid) {
            Ok(shared) => (Some(shared.ring), shared.slot, shared.pool),
            Err(error) => {
                error!("cannot use the shared files: {error}; tracing into this process's memory only (vramshare ps and dump will not see it)");
                if let Some(name) = &config().pool {
                    error!(
                        "not in pool {name}: VRAMSHARE_POOL_QUOTA holds it as a quota of its own"
                    );
                }
                (None, None, None)
            }
        };
        let counters = match slot {
            Some(slot) => slot.devices(),
            None => Vec::leak(local_counters()),
        };
        State {
            pid,
            ledger: Ledger::new(
                counters,
                pool.map(|(_, p)| p),
                config().priority == crate::config::Priority::Low,
            ),
            pool,
            registry: REGISTRY.get().copied(),
            trace: config().trace.is_some().then(TraceLog::new),
            ring,
            slot,
            quotas: (0..MAX_DEVICES)
                .map(|_| AtomicU64::new(QUOTA_UNRESOLVED))
                .collect(),
            applied_quota: (0..MAX_DEVICES)
                .map(|_| AtomicU64::new(vramshare_common::registry::NO_QUOTA))
                .collect(),
            streams: (0..MAX_DEVICES)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            driver_streams: (0..MAX_DEVICES)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            runtime_major: AtomicI32::new(0),
            runtime_version: AtomicI32::new(0),
            pool_slack: Default::default(),
            devices_learned: std::sync::Once::new(),
        }
    }

    pub fn cached_quota(&self, device: u32) -> u64 {
        self.quotas[device as usize].load(Ordering::Acquire)
    }

    /// Records an event in this process's trace and in the shared ring.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        op: Op,
        api: Api,
        device: i32,
        ptr: usize,
        size: u64,
        placement: Placement,
        rc: i32,
    ) {
        self.record_event(self.event(op, api, device, ptr, size, placement, rc));
    }

    /// An event of this process and thread, now.
    #[allow(clippy::too_many_arguments)]
    pub fn event(
        &self,
        op: Op,
        api: Api,
        device: i32,
        ptr: usize,
        size: u64,
        placement: Placement,
        rc: i32,
    ) -> Event {
        Event::new(
            0,
            monotonic_ns(),
            self.pid,
            thread_id(),
            op,
            api,
            device,
            ptr as u64,
            size,
            placement,
            rc,
        )
    }

    /// After a shared file was cut short under this process (its lost
    /// pages now read as zeros, [`vramshare_common::fault_guard`]): puts
    /// back the quotas this process last applied, which would otherwise
    /// read as 0 and send every allocation to the host, and says once what
    /// is lost; true if it did. Asked before each quota is read, and by the shim's thread.
    pub fn repair_lost_pages(&self) -> bool {
        use vramshare_common::fault_guard::{pages_lost, touch};
        // Its own slots first, so that a page of them that was cut short is
        // found now, before the quota is read from it.
        if let Some(slot) = self.slot {
            touch(slot);
        }
        if let Some((_, pool)) = self.pool {
            touch(pool);
        }
        if !pages_lost() {
            return false;
        }
        for device in 0..MAX_DEVICES as u32 {
            if self.cached_quota(device) == QUOTA_RESOLVED {
                let applied = self.applied_quota[device as usize].load(Ordering::Acquire);
                self.ledger
                    .device(device)
                    .quota
                    .store(applied, Ordering::Release);
            }
        }
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| error!("a shared file in {} was cut short while this process mapped it: the lost pages read as zeros in this process only; its quotas are put back, but its counts of device and spilled bytes there restart from zero, and vramshare ps and its pool no longer see all it holds", default_dir().display()));
        true
    }

    /// Records a prepared event (one that carries more than `record` takes),
    /// in this process's trace and in the shared ring.
    pub fn record_event(&self, event: Event) {
        if let Some(trace) = &self.trace {
            trace.record(&event);
        }
        if let Some(ring) = &self.ring {
            ring.push(&event);
        }
    }

    /// Whether this process has a registry slot (and so can have its quota
    /// changed by `vramshare quota set`).
    pub fn listed(&self) -> bool {
        self.slot.is_some()
    }

    /// On first use of a device: records how many devices the process sees
    /// (for `vramshare quota set`), and says once of a quota entry that
    /// names none of them.
    pub fn learn_device_count(&self, ask: impl FnOnce() -> Option<u32>) {
        self.devices_learned.call_once(|| {
            let Some(count) = ask() else { return };
            if let Some(slot) = self.slot {
                slot.set_device_count(count);
            }
            let config = config();
            for (variable, quota) in [
                ("VRAMSHARE_QUOTA", &config.quota),
                ("VRAMSHARE_POOL_QUOTA", &config.pool_quota),
            ] {
                let crate::config::Quota::PerDevice(list) = quota else {
                    continue;
                };
                for (device, _) in list.iter().filter(|(device, _)| *device >= count) {
                    error!("{variable} names device {device}, but this process sees {count} device{} (numbered from 0): that entry holds nothing; device numbers are the process's own, after CUDA_VISIBLE_DEVICES", if count == 1 { "" } else { "s" });
                }
            }
        });
    }

    pub fn cache_quota(&self, device: u32, quota: u64) {
        self.quotas[device as usize].store(quota, Ordering::Release);
    }
}

/// What this process uses of the shared files.
struct Shared {
    ring: Ring<Mapped<MmapMut>>,
    slot: Option<&'static ProcessSlot>,
    pool: Option<(u32, &'static PoolSlot)>,
}

/// The registry, mapped for the life of the process.
static REGISTRY: OnceLock<&'static Registry<Mapped<MmapMut>>> = OnceLock::new();
/// The pool table, likewise, once a process has joined a pool.
static POOLS: OnceLock<&'static Pools<Mapped<MmapMut>>> = OnceLock::new();

/// Maps the shared ring and registry in `VRAMSHARE_DIR` (making them if
/// needed), claims this process's registry slot, and joins its pool. A full
/// registry is not an error: the process is traced, just not listed.
fn open_shared(pid: u32) -> Result<Shared, FileError> {
    let dir = default_dir();
    let invalid = |name: &str, why: String| FileError::Invalid(dir.join(name), why);
    let replaced = |what: &FileError| notice!("replaced {what} (no process was using it)");
    let ring = Ring::new(open_or_replace::<RingFile>(&dir, replaced)?)
        .map_err(|why| invalid("ring", why))?;
    // The registry stays mapped for the life of the process: the slot's
    // counters are the ledger's.
    let registry: &'static Registry<Mapped<MmapMut>> = match REGISTRY.get() {
        Some(registry) => registry,
        None => {
            let registry = Registry::new(open_or_replace::<RegistryFile>(&dir, replaced)?)
                .map_err(|why| invalid("registry", why))?;
            REGISTRY.get_or_init(|| Box::leak(Box::new(registry)))
        }
    };
    let start = process::start_time(pid).unwrap_or(0);
    let slot = registry.claim(
        pid,
        start,
        &process::cmdline(pid),
        config().spill == Spill::Off,
    );
    if slot.is_none() {
        error!("the process registry in {} is full (every one of its slots is held by a live process): this process is traced, but vramshare ps does not list it and vramshare quota set cannot reach it", dir.display());
    }
    let pool = match &config().pool {
        None => None,
        // Its bytes would stay counted in the pool if it died: nothing
        // could tell that it had.
        Some(name) if slot.is_none() => {
            error!("not in pool {name}: a pool member must be listed in the registry, so that its bytes leave the pool however it ends; VRAMSHARE_POOL_QUOTA holds it as a quota of its own");
            None
        }
        Some(name) => {
            // A pool table that cannot be used costs the pool, not the
            // registry and the ring.
            let opened = match POOLS.get() {
                Some(pools) => Ok(*pools),
                None => open_or_replace::<PoolFile>(&dir, replaced)
                    .and_then(|map| Pools::new(map).map_err(|why| invalid("pools", why)))
                    .map(|pools| *POOLS.get_or_init(|| Box::leak(Box::new(pools)))),
            };
            let pools = match opened {
                Ok(pools) => Some(pools),
                Err(error) => {
                    error!("cannot use the pool table: {error}; not in pool {name}: VRAMSHARE_POOL_QUOTA holds it as a quota of its own");
                    None
                }
            };
            let joined = pools.and_then(|pools| {
                match pools.join(name, || pools.lock(Duration::from_secs(2))) {
                    Ok(joined) => Some(joined),
                    Err(JoinError::Full) => {
                        error!("the pool table in {} is full (every one of its slots holds a pool with members): not in pool {name}; VRAMSHARE_POOL_QUOTA holds it as a quota of its own", dir.display());
                        None
                    }
                    Err(JoinError::Locked) => {
                        error!("the pool table in {} stayed locked for 2 s (by a stopped process?): not in pool {name}; VRAMSHARE_POOL_QUOTA holds it as a quota of its own", dir.display());
                        None
                    }
                }
            });
            if let Some((index, pool)) = joined {
                if let Some(slot) = slot {
                    slot.set_pool(Some(index), config().priority as u32);
                }
                // Members that died without leaving are taken out now, and
                // if this process (which holds nothing yet) is alone in the
                // pool, the pool holds nothing.
                registry.reap_dead(index, |dead| reap(dead, Some((index, pool))));
                if clear_if_empty(registry, index, pool, Some(pid)) {
                    // Alone in a pool its members left by dying: it takes
                    // this process's budget, as a pool made anew would.
                    for device in 0..MAX_DEVICES as u32 {
                        pool.set_budget(device, None);
                    }
                }
            }
            joined
        }
    };
    Ok(Shared { ring, slot, pool })
}

/// A pool with no live member (other than `except`) holds nothing (see
/// [`PoolSlot::clear_if_unchanged`]); true if it had none.
fn clear_if_empty(
    registry: &Registry<Mapped<MmapMut>>,
    index: u32,
    pool: &PoolSlot,
    except: Option<u32>,
) -> bool {
    let observed = pool.counts();
    let empty = registry
        .live()
        .iter()
        .all(|p| p.pool != Some(index) || Some(p.pid) == except);
    if empty {
        pool.clear_if_unchanged(&observed);
    }
    empty
}

/// Takes a member that is gone (this process at exit, or one that died)
/// out of its pool `(index, pool)`: its device bytes and its place among
/// the members; the last one out frees the pool's slot.
pub fn reap(gone: &ProcessSlot, pool: Option<(u32, &PoolSlot)>) {
    if let Some((index, pool)) = pool {
        take_bytes_out(gone, pool);
        leave_pool(index, pool);
    }
}

fn take_bytes_out(gone: &ProcessSlot, pool: &PoolSlot) {
    for (device, counters) in gone.devices().iter().enumerate() {
        pool.unreserve(device as u32, counters.device_bytes.load(Ordering::Acquire));
    }
}

/// One member out of pool `index`; the last one frees its slot.
fn leave_pool(index: u32, pool: &PoolSlot) {
    if pool.leave() {
        if let Some(pools) = POOLS.get() {
            // Briefly: this may run at exit. Unfreed, the empty slot is
            // freed when a pool is next made in a full table.
            pools.free_if_empty(index, || pools.lock(Duration::from_millis(100)));
        }
    }
}
