//! The shared files as this process uses them: the ring and registry
//! mapped, its registry slot claimed, its pool joined, and given back at
//! exit.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

use memmap2::MmapMut;
use vramshare_common::files::{default_dir, open_or_replace, FileError, Mapped};
use vramshare_common::pool::{JoinError, PoolFile, PoolSlot, Pools};
use vramshare_common::process;
use vramshare_common::registry::{ProcessSlot, Registry, RegistryFile};
use vramshare_common::ring::{Ring, RingFile};

use super::{config, State};
use crate::config::Device;

impl State {
    /// At exit: gives the registry slot back, once (a member that wrongly
    /// found this process dead has taken it out of the pool already), and
    /// takes the process out of its pool. What it still holds stops
    /// counting in the pool; members that died are taken out too, and if
    /// none is left the pool holds nothing. Its own place goes last, so
    /// that the last one out frees the slot only when nothing more is done
    /// to it.
    pub fn give_back(&self) {
        // Kept with the slot's other numbers at exit.
        self.publish_launches();
        let Some(slot) = self.slot.filter(|slot| slot.release()) else {
            return;
        };
        let Some((index, pool)) = self.pool else {
            return;
        };
        take_bytes_out(slot, pool);
        if let Some(registry) = self.registry {
            registry.reap_dead(index, |dead| reap(dead, Some((index, pool))));
            clear_if_empty(registry, index, pool, None);
        }
        leave_pool(index, pool);
    }
}

/// What this process uses of the shared files.
pub(super) struct Shared {
    pub ring: Ring<Mapped<MmapMut>>,
    pub slot: Option<&'static ProcessSlot>,
    pub pool: Option<(u32, &'static PoolSlot)>,
}

/// The registry, mapped for the life of the process.
pub(super) static REGISTRY: OnceLock<&'static Registry<Mapped<MmapMut>>> = OnceLock::new();
/// The pool table, likewise, once a process has joined a pool.
static POOLS: OnceLock<&'static Pools<Mapped<MmapMut>>> = OnceLock::new();

/// Maps the shared ring and registry in `VRAMSHARE_DIR` (making them if
/// needed), claims this process's registry slot, and joins its pool. A full
/// registry is not an error: the process is traced, just not listed.
pub(super) fn open_shared(pid: u32) -> Result<Shared, FileError> {
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
    let slot = registry.claim(pid, start, &process::cmdline(pid), config().spill);
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
                    slot.set_pool(Some(index), config().priority);
                }
                // Members that died without leaving are taken out now, and
                // if this process (which holds nothing yet) is alone in the
                // pool, the pool holds nothing.
                registry.reap_dead(index, |dead| reap(dead, Some((index, pool))));
                if clear_if_empty(registry, index, pool, Some(pid)) {
                    // Alone in a pool its members left by dying: it takes
                    // this process's budget, as a pool made anew would.
                    for device in Device::all() {
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
    for (device, counters) in Device::all().zip(gone.devices()) {
        pool.unreserve(device, counters.device_bytes.load(Ordering::Acquire));
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
