//! The process's state: configuration, ledger, trace and per-device caches.
//!
//! The configuration is read when the library is loaded (so that a malformed
//! variable stops the job before it starts); everything else is made on the
//! first hooked call, so a process that never calls CUDA pays nothing more.
//! After `fork` the child gets a fresh state of its own: it is a new process
//! with its own quota, and whatever locks the parent's other threads held at
//! the moment of the fork stay behind in the parent's copy, never touched.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use memmap2::MmapMut;
use vramshare_common::event::{Api, Event, Op, Placement};
use vramshare_common::files::default_dir;
use vramshare_common::files::Mapped;
use vramshare_common::pool::PoolSlot;
use vramshare_common::process::monotonic_ns;
use vramshare_common::registry::{local_counters, ProcessSlot, Registry};
use vramshare_common::ring::Ring;

use crate::config::{Config, Device, MAX_DEVICES};
pub mod access;
pub mod gate;
pub mod grouped;
mod launch_counts;
pub mod ledger;
pub mod listed;
pub mod outgoing;
pub mod report;
pub mod reused;
mod shared;
pub mod span;
pub mod tier;
pub mod trace;

use access::Access;
use launch_counts::LaunchCounts;
pub use launch_counts::{Attribution, KINDS};
use ledger::Ledger;
use trace::{thread_id, TraceLog};

pub use shared::reap;
use shared::{open_shared, REGISTRY};

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
    /// Per stream-ordered pool, the slack last counted (see
    /// [`crate::policy::stream_pools`]).
    pub pool_slack: std::sync::Mutex<rustc_hash::FxHashMap<usize, Counted>>,
    /// Per device, the allocations from its stream-ordered pools under way
    /// and the room held under its quota for the pools to grow into,
    /// counted as the device's ([`PoolRoom`]).
    pub pool_rooms: Vec<std::sync::Mutex<PoolRoom>>,
    /// The pools' growths, and the rises of their reserve that did not fit
    /// under the quota, for the trace.
    pub pool_growths: std::sync::Mutex<vramshare_common::trace_json::PoolsJson>,
    /// Set once the process's device count is known ([`State::learn_device_count`]).
    devices_learned: std::sync::Once,
    /// That count (0 until known): `CUDA_VISIBLE_DEVICES` is read once, so
    /// it does not change while the process runs.
    device_count: AtomicU32,
    /// Kernel launches, by the call that made them, and where their total
    /// is published for `vramshare ps` (the registry slot).
    launches: LaunchCounts,
    launch_total: &'static AtomicU64,
    /// Where the uses of blocks are published: (all, found in host memory).
    use_totals: (&'static AtomicU64, &'static AtomicU64),
    /// What the launches touch: the blocks each names, profiled per step.
    pub access: Access,
    /// The spill tier's blocks and its gate.
    pub tier: tier::Tier,
    /// The pointers set on each cuDNN variant pack, by its handle.
    pub variant_packs: std::sync::Mutex<rustc_hash::FxHashMap<usize, VariantPack>>,
    /// The workspace set on each cuBLAS handle, by the handle.
    pub blas_workspaces: std::sync::Mutex<rustc_hash::FxHashMap<usize, usize>>,
    /// The stream set on each cuBLAS and cuDNN handle, by handle
    /// ([`crate::policy::library_streams`]).
    pub library_streams: std::sync::Mutex<rustc_hash::FxHashMap<usize, usize>>,
}

/// The pointers a cuDNN variant pack was given (`cudnnBackendSetAttribute`):
/// its data pointers and its workspace.
#[derive(Clone, Debug, Default)]
pub struct VariantPack {
    pub data: Vec<usize>,
    pub workspace: usize,
}

/// The allocations from a device's stream-ordered pools under way (their
/// tickets) and the room held for the pools' growths, reserved in the
/// ledger and counted as the device's; changed together under one lock
/// ([`crate::policy::stream_pools`]).
#[derive(Default)]
pub struct PoolRoom {
    pub out: u64,
    pub held: u64,
}

/// What the shim counted for a stream-ordered pool at its last reading.
#[derive(Clone, Copy, Debug)]
pub struct Counted {
    pub device: Device,
    pub backend: crate::cuda::backend::Backend,
    /// Its reserve beyond the live bytes below, as last counted.
    pub slack: u64,
    /// The pool's whole reserve at that reading: new memory shows in it,
    /// where a free does not.
    pub reserved: u64,
    /// The bytes of the shim's blocks live in the pool (asked of CUDA, and
    /// not yet freed).
    pub live: u64,
}

pub const QUOTA_UNRESOLVED: u64 = u64::MAX;
pub const QUOTA_RESOLVED: u64 = 0;

static CONFIG: OnceLock<Config> = OnceLock::new();
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());

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
/// value is ([`report::check_target`]).
fn check_trace_target(config: Config) -> Result<Config, crate::config::ConfigError> {
    if let Some(template) = &config.trace {
        // The system call, not libc's getpid: a job's own getpid wrapper
        // (an interposer of its own) should see only the job's calls.
        // SAFETY: SYS_getpid takes no arguments and cannot fail.
        let pid = unsafe { libc::syscall(libc::SYS_getpid) } as u32;
        let path = report::trace_path(template, pid);
        if let Err(reason) = report::check_target(&path) {
            return Err(crate::config::ConfigError {
                variable: "VRAMSHARE_TRACE",
                value: template.clone(),
                reason,
                forms: report::TRACE_FORMS.to_string(),
            });
        }
    }
    Ok(config)
}

pub fn config() -> &'static Config {
    load_config()
}

/// Locks `mutex`, whatever a panic elsewhere left in it: no lock of the
/// shim's may make it unusable.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        }
    }
}

/// Whether this process has called CUDA through the shim (and so has a trace).
pub fn started() -> Option<&'static State> {
    let current = STATE.load(Ordering::Acquire);
    // SAFETY: states are leaked, never freed.
    (!current.is_null()).then(|| unsafe { &*current })
}

/// In a forked child: the parent's state is left as it is (it may hold
/// locks of threads that do not exist here); the child starts empty on its
/// next CUDA call. A thread of the parent may have been making it: not here.
pub fn forget_after_fork() {
    STATE.store(std::ptr::null_mut(), Ordering::Release);
    MAKING.store(false, Ordering::Release);
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
        let (counters, launch_total, use_totals) = match slot {
            Some(slot) => (slot.devices(), slot.launches(), slot.uses()),
            None => {
                let local = || &*Box::leak(Box::new(AtomicU64::new(0)));
                (&*Vec::leak(local_counters()), local(), (local(), local()))
            }
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
            pool_slack: Default::default(),
            pool_rooms: (0..MAX_DEVICES).map(|_| Default::default()).collect(),
            pool_growths: Default::default(),
            devices_learned: std::sync::Once::new(),
            device_count: AtomicU32::new(0),
            launches: LaunchCounts::new(),
            launch_total,
            use_totals,
            access: Access::default(),
            tier: tier::Tier::default(),
            variant_packs: Default::default(),
            blas_workspaces: Default::default(),
            library_streams: Default::default(),
        }
    }

    pub fn cached_quota(&self, device: Device) -> u64 {
        self.quotas[device.index()].load(Ordering::Acquire)
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
        for device in Device::all() {
            if self.cached_quota(device) == QUOTA_RESOLVED {
                let applied = self.applied_quota[device.index()].load(Ordering::Acquire);
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

    /// Counts a kernel launch (or library call) made through `api`.
    pub fn count_launch(&self, api: Api, how: Attribution) {
        self.launches.count(api, how);
    }

    /// The launches counted so far, by the call that made them.
    pub fn launches_by_api(&self) -> Vec<(Api, u64)> {
        self.launches.by_api()
    }

    /// The same, by what their operands named.
    pub fn launches_by_attribution(&self) -> Vec<(Api, [u64; KINDS])> {
        self.launches.by_attribution()
    }

    /// Puts the launches' total and the uses of blocks where `vramshare ps`
    /// reads them (by the shim's thread, every 50 ms, and at exit).
    pub fn publish_launches(&self) {
        use access::profile::{USES, USES_IN_HOST};
        self.launch_total
            .store(self.launches.total(), Ordering::Relaxed);
        let (uses, in_host) = self.use_totals;
        uses.store(USES.load(Ordering::Relaxed), Ordering::Relaxed);
        in_host.store(USES_IN_HOST.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether this process has a registry slot (and so can have its quota
    /// changed by `vramshare quota set`).
    pub fn listed(&self) -> bool {
        self.slot.is_some()
    }

    /// The process's device count, once learned.
    pub fn device_count(&self) -> Option<u32> {
        Some(self.device_count.load(Ordering::Relaxed)).filter(|&count| count > 0)
    }

    /// On first use of a device: records how many devices the process sees
    /// (for `vramshare quota set`) and which GPU each is (`pci`: its PCI
    /// address, for `vramshare ps`), and says once of a quota entry that
    /// names none of them.
    pub fn learn_device_count(
        &self,
        ask: impl FnOnce() -> Option<u32>,
        pci: impl Fn(u32) -> Option<(u32, u32, u32)>,
    ) {
        self.devices_learned.call_once(|| {
            let Some(count) = ask() else { return };
            self.device_count.store(count, Ordering::Relaxed);
            if let Some(slot) = self.slot {
                slot.set_device_count(count);
                for (number, counters) in slot.devices().iter().enumerate().take(count as usize) {
                    if let Some((domain, bus, device)) = pci(number as u32) {
                        let code = vramshare_common::pci::code(domain, bus, device);
                        counters.pci.store(code, Ordering::Relaxed);
                    }
                }
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

    pub fn cache_quota(&self, device: Device, quota: u64) {
        self.quotas[device.index()].store(quota, Ordering::Release);
    }
}
