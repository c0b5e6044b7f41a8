//! The registry's own tests: slots claimed, seen live and released, dead ones
//! hidden and reclaimed, and what a pool's members want.
use super::*;

use crate::files::{open_existing, open_or_create};

#[test]
fn a_claimed_slot_is_seen_live_and_released() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(open_or_create::<RegistryFile>(dir.path()).unwrap()).unwrap();
    let me = std::process::id();
    let slot = registry
        .claim(
            me,
            process::start_time(me).unwrap(),
            "python train.py",
            Spill::Host,
        )
        .unwrap();
    slot.devices()[1]
        .device_bytes
        .store(4096, Ordering::Relaxed);
    slot.devices()[1].peak_device.store(4096, Ordering::Relaxed);
    let reader = Registry::new(open_existing::<RegistryFile>(dir.path()).unwrap()).unwrap();
    let live = reader.live();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].cmdline, "python train.py");
    assert_eq!(
        live[0].devices,
        vec![(
            1,
            DeviceInfo {
                device_bytes: 4096,
                peak_device: 4096,
                ..DeviceInfo::default()
            }
        )]
    );
    slot.release();
    assert!(reader.live().is_empty());
    let gone = reader.gone();
    assert_eq!(
        (gone.len(), gone[0].cmdline.as_str()),
        (1, "python train.py"),
        "kept for dump"
    );
    assert_eq!(
        gone[0].devices[0].1.device_bytes, 4096,
        "with its numbers at exit"
    );
}

#[test]
fn slots_of_dead_processes_are_hidden_and_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(open_or_create::<RegistryFile>(dir.path()).unwrap()).unwrap();
    let me = std::process::id();
    let start = process::start_time(me).unwrap();
    // The same pid with another start time: a process that died, its pid reused.
    let stale = registry
        .claim(me, start - 1, "dead job", Spill::Host)
        .unwrap();
    assert!(registry.live().is_empty(), "never trusted");
    assert_eq!(registry.gone()[0].cmdline, "dead job", "but kept for dump");
    let long = "live job with a long command line ".repeat(10);
    let mine = registry.claim(me, start, &long, Spill::Off).unwrap();
    assert!(
        !std::ptr::eq(stale, mine),
        "never-used slots are taken first"
    );
    for _ in 2..DEFAULT_SLOTS {
        registry.claim(me, start, "filler", Spill::Host).unwrap();
    }
    let last = registry.claim(me, start, "one more", Spill::Host).unwrap();
    assert!(
        std::ptr::eq(stale, last),
        "then the dead process's slot is reclaimed"
    );
    assert!(
        registry.claim(me, start, "too many", Spill::Host).is_none(),
        "all held by a live process"
    );
    assert!(registry.gone().is_empty());
    let live = registry.live();
    let long_one = live.iter().find(|p| p.spill == Spill::Off).unwrap();
    assert_eq!(
        long_one.cmdline.len(),
        CMDLINE_BYTES,
        "cut to the slot's room"
    );
}

#[test]
fn what_a_pools_live_members_of_one_priority_want() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(open_or_create::<RegistryFile>(dir.path()).unwrap()).unwrap();
    let me = std::process::id();
    let start = process::start_time(me).unwrap();
    let dead = registry.claim(me, start - 1, "dead", Spill::Host).unwrap();
    let first = registry.claim(me, start, "first", Spill::Host).unwrap();
    let second = registry.claim(me, start, "second", Spill::Host).unwrap();
    for (slot, bytes) in [(dead, 7000), (first, 100), (second, 20)] {
        slot.set_pool(Some(3), Priority::High);
        slot.devices()[1].wanted.store(bytes, Ordering::Relaxed);
    }
    assert_eq!(
        registry.wanted_in_pool(3, Priority::High)[1],
        120,
        "the dead one's ask does not count"
    );
    second.set_pool(Some(4), Priority::High);
    assert_eq!(
        registry.wanted_in_pool(3, Priority::High)[1],
        100,
        "nor another pool's"
    );
    assert_eq!(
        registry.wanted_in_pool(3, Priority::Normal),
        [0; MAX_DEVICES],
        "nor another priority's"
    );
}
