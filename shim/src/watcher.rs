//! The shim's own thread, for what changes while the job runs. It starts
//! once the process is listed in the shared registry ([`crate::lifecycle`]),
//! and every 50 ms:
//! - applies a quota changed by `vramshare quota set --pid`: the command
//!   writes it into this process's registry slot (which the policy also
//!   reads at every allocation); a raised quota promotes spilled blocks, a
//!   cut one demotes the device's managed blocks to the host until the
//!   process is back under it (new allocations go to the host meanwhile);
//! - in a pool: takes the bytes of members that died without leaving out
//!   of the pool, applies a cut of the pool's budget, gives way to the
//!   high-priority members (demotes managed blocks until the pool has the
//!   room they want: for allocations waiting, and for their spilled
//!   blocks) and keeps that room out of its own allocations' reach, and
//!   promotes spilled blocks into room other members freed, beyond what the
//!   high-priority members want.
//!
//! A job whose allocator caches (PyTorch) may not allocate again for a long
//! time, hence a thread rather than waiting for the next call; no signal,
//! no handler in the job. It moves memory through the runtime, on the
//! device's primary context, and only where the runtime is already loaded:
//! a program that uses the driver alone is left to its next allocation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vramshare_common::event::{Api, Op, Placement};
use vramshare_common::registry::NO_QUOTA;

use crate::config::{Device, Priority, MAX_DEVICES};
use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::policy;
use crate::state::{config, state, State, QUOTA_UNRESOLVED};

/// How often the thread looks at the registry.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Set at exit: the thread stops touching CUDA.
pub static EXITING: AtomicBool = AtomicBool::new(false);

/// The thread's work, every [`INTERVAL`] until exit (started by
/// [`crate::lifecycle`]).
pub fn watch() {
    let state = state();
    let high = config().priority == Priority::High;
    // The pool's budgets as this process last acted on them.
    let mut pool_seen: Vec<Option<u64>> = Device::all()
        .map(|d| state.pool.and_then(|(_, pool)| pool.budget(d)))
        .collect();
    // A high-priority member: the spilled bytes it now asks room for.
    let mut asked_for_spilled = [0u64; MAX_DEVICES];
    loop {
        std::thread::sleep(INTERVAL);
        if EXITING.load(Ordering::Acquire) {
            return;
        }
        let _ = state.repair_lost_pages();
        state.publish_launches();
        let replay = || {
            let (matched, missed, _) = state.access.replay.agreement();
            (matched, missed)
        };
        state
            .tier
            .sample(vramshare_common::process::monotonic_ns(), replay);
        if let (Some((index, pool)), Some(registry)) = (state.pool, state.registry) {
            // Members killed without leaving give their bytes back here.
            registry.reap_dead(index, |dead| crate::state::reap(dead, Some((index, pool))));
            // What the high-priority members want room for; a member that
            // dies stops wanting with it.
            let wanted_by_high = if high {
                [0; MAX_DEVICES]
            } else {
                registry.wanted_in_pool(index, Priority::High)
            };
            for device in Device::all() {
                if state.cached_quota(device) == QUOTA_UNRESOLVED {
                    continue;
                }
                let budget = pool.budget(device);
                let before = std::mem::replace(&mut pool_seen[device.index()], budget);
                if before != budget {
                    record_limit(state, Op::Budget, device, before, budget);
                }
                let cut = budget.unwrap_or(u64::MAX) < before.unwrap_or(u64::MAX);
                let usage = state.ledger.device(device);
                let spilled = usage.spilled_bytes.load(Ordering::Acquire);
                if high {
                    // Spilled blocks wait for room as an allocation does,
                    // as far as the process's own quota lets them back.
                    let room = usage
                        .quota
                        .load(Ordering::Acquire)
                        .saturating_sub(usage.device_bytes.load(Ordering::Acquire));
                    let ask = spilled.min(room);
                    let asked = std::mem::replace(&mut asked_for_spilled[device.index()], ask);
                    if ask > asked {
                        usage.wanted.fetch_add(ask - asked, Ordering::AcqRel);
                    } else {
                        usage.wanted.fetch_sub(asked - ask, Ordering::AcqRel);
                    }
                }
                let wanted = wanted_by_high[device.index()];
                // New allocations and promotions leave that room too.
                state.ledger.leave_for_high(device, wanted);
                let give_way = wanted > policy::pool_room(state, device);
                if !cut && spilled == 0 && !give_way {
                    continue;
                }
                if !use_device(device) {
                    continue;
                }
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if give_way {
                        policy::demote_for(state, device, || {
                            registry.wanted_in_pool(index, Priority::High)[device.index()]
                        });
                    } else if cut {
                        policy::demote_to_quota(state, device, Backend::Runtime);
                    } else {
                        // Room other members freed: spilled blocks come
                        // back, after what the high-priority members want.
                        policy::promote_leaving(state, device, Backend::Runtime, wanted);
                    }
                }));
            }
        }
        for device in Device::all() {
            if state.cached_quota(device) == QUOTA_UNRESOLVED {
                continue;
            }
            let now = state.ledger.device(device).quota.load(Ordering::Acquire);
            if state.repair_lost_pages() {
                // Read from a page that was just lost, not set by anyone.
                continue;
            }
            let before = state.applied_quota[device.index()].swap(now, Ordering::AcqRel);
            if before == now {
                // A cut whose moves gave way (the job's threads busy in
                // CUDA) is tried again at each look while still over it.
                let over = state
                    .ledger
                    .device(device)
                    .device_bytes
                    .load(Ordering::Acquire)
                    > now;
                if over && state.tier.active.load(Ordering::Relaxed) && use_device(device) {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        policy::demote_to_quota(state, device, Backend::Runtime)
                    }));
                }
                continue;
            }
            let show = |q: u64| {
                if q == NO_QUOTA {
                    "none".to_string()
                } else {
                    crate::config::human_bytes(q)
                }
            };
            info!(
                "device {device}: quota changed from {} to {}",
                show(before),
                show(now)
            );
            let known = |q: u64| (q != NO_QUOTA).then_some(q);
            record_limit(state, Op::Quota, device, known(before), known(now));
            // The runtime's current device is per thread: make it this one.
            if !use_device(device) {
                continue;
            }
            let acted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if now < before {
                    policy::demote_to_quota(state, device, Backend::Runtime);
                } else {
                    policy::promote(state, device, Backend::Runtime);
                }
            }));
            if acted.is_err() {
                warn!("applying device {device}'s new quota failed; it applies at the next allocation");
            }
        }
    }
}

/// Records a limit's change in the trace: `size` the new one, `ptr` the one
/// before (`u64::MAX` for none), for the pictures that draw limits over time.
fn record_limit(state: &State, op: Op, device: Device, before: Option<u64>, now: Option<u64>) {
    state.record(
        op,
        Api::vramshare,
        device.number() as i32,
        before.unwrap_or(u64::MAX) as usize,
        now.unwrap_or(u64::MAX),
        Placement::Unknown,
        0,
    );
}

/// Makes `device` current for this thread, through the runtime if the
/// program has it loaded (never loading it into a driver-only program).
fn use_device(device: Device) -> bool {
    cudart_sys::loaded_object_named("libcudart.so").is_some()
        // SAFETY: plain runtime call.
        && unsafe { real::cudaSetDevice(device.number() as i32) } == 0
}
