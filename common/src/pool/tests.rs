//! The pool table's joining, budgets, reservations and freeing.

use super::*;
use crate::files::{open_or_create, Mapped};
use memmap2::MmapMut;

fn dev(number: u32) -> Device {
    Device::new(number).unwrap()
}

type Table = Pools<Mapped<MmapMut>>;

fn table(dir: &std::path::Path) -> Table {
    Pools::new(open_or_create::<PoolFile>(dir).unwrap()).unwrap()
}

fn join<'a>(pools: &'a Table, name: &str) -> Result<(u32, &'a PoolSlot), JoinError> {
    pools.join(name, || pools.map.lock(std::time::Duration::from_secs(1)))
}

/// One member leaves pool `index`; the last one out frees it.
fn leave(pools: &Table, index: u32) {
    if pools.slots()[index as usize].leave() {
        pools.free_if_empty(index, || pools.map.lock(std::time::Duration::from_secs(1)));
    }
}

#[test]
fn a_pool_is_joined_by_name_and_holds_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    let (a, pool) = join(&pools, "team-a").unwrap();
    let (again, _) = join(&pools, "team-a").unwrap();
    let (b, _) = join(&pools, "team-b").unwrap();
    assert_eq!(a, again);
    assert_ne!(a, b);
    assert_eq!(pool.budget(dev(0)), None);
    assert!(
        pool.try_reserve(dev(0), u64::MAX / 2),
        "no budget: no limit"
    );
    pool.unreserve(dev(0), u64::MAX / 2);
    assert_eq!(pool.offer_budget(dev(0), 100), 100);
    assert_eq!(
        pool.offer_budget(dev(0), 50),
        100,
        "the running budget stays"
    );
    assert!(pool.try_reserve(dev(0), 60));
    assert!(!pool.try_reserve(dev(0), 41));
    assert!(pool.try_reserve(dev(0), 40));
    assert_eq!(pool.device_bytes(dev(0)), 100);
    pool.unreserve(dev(0), 1000);
    assert_eq!(pool.device_bytes(dev(0)), 0, "never below zero");
    assert_eq!(pool.set_budget(dev(0), None), Some(100));
    pool.set_budget(dev(2), Some(800));
    assert!(
        !pool.try_reserve_as(dev(2), 701, true, 0),
        "low priority leaves 1/8"
    );
    assert!(
        !pool.try_reserve_as(dev(2), 601, true, 100),
        "and what high-priority members want"
    );
    assert!(pool.try_reserve_as(dev(2), 600, true, 100));
    assert!(!pool.try_reserve_as(dev(2), 101, false, 100));
    assert!(pool.try_reserve_as(dev(2), 100, false, 100));
    assert!(
        pool.try_reserve_as(dev(2), 100, false, 0),
        "the others may take it"
    );
    assert_eq!(pools.in_use().len(), 2);
    assert!(check_name("team-a.v2_x").is_ok());
    assert!(check_name("").is_err());
    assert!(check_name("a b").is_err());
    assert!(check_name(&"x".repeat(49)).is_err());
}

#[test]
fn threads_reserving_at_once_never_pass_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    let (_, pool) = join(&pools, "p").unwrap();
    pool.offer_budget(dev(1), 1000);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for i in 0..20_000u64 {
                    let size = 1 + i % 97;
                    if pool.try_reserve(dev(1), size) {
                        assert!(pool.device_bytes(dev(1)) <= 1000);
                        pool.unreserve(dev(1), size);
                    }
                }
            });
        }
    });
    assert_eq!(pool.device_bytes(dev(1)), 0);
}

#[test]
fn a_slot_in_an_unknown_state_is_passed_over_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    // Every slot but one corrupt (or of a newer version).
    let (keep, _) = join(&pools, "p").unwrap();
    leave(&pools, keep);
    for (index, slot) in pools.slots().iter().enumerate() {
        if index as u32 != keep {
            slot.state.store(7, Ordering::Release);
        }
    }
    let start = std::time::Instant::now();
    let (index, _) = join(&pools, "other").unwrap();
    assert_eq!(index, keep, "the one usable slot");
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(join(&pools, "a third").err(), Some(JoinError::Full));
    assert!(pools.find("other").is_some());
}

#[test]
fn the_last_member_out_frees_the_slot_and_a_pool_made_again_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    let (index, pool) = join(&pools, "p").unwrap();
    join(&pools, "p").unwrap();
    assert_eq!(pool.members(), 2);
    pool.offer_budget(dev(0), 8 << 20);
    pool.reserve(dev(0), 4096);
    leave(&pools, index);
    assert!(pool.in_use(), "one member left");
    leave(&pools, index);
    assert!(!pool.in_use() && pools.find("p").is_none(), "freed");
    let (again, pool) = join(&pools, "p").unwrap();
    assert_eq!(again, index);
    assert_eq!(pool.budget(dev(0)), None, "its old budget is gone");
    assert_eq!(pool.device_bytes(dev(0)), 0);
    leave(&pools, index);
    assert!(!pool.leave());
    assert_eq!(pool.members(), 0, "never below zero");
    // Far more pools than slots, one after another.
    for n in 0..(3 * DEFAULT_POOLS) {
        let (index, _) = join(&pools, &format!("pool-{n}")).expect("a free slot");
        leave(&pools, index);
    }
}

#[test]
fn a_running_pool_is_found_wherever_it_is_so_a_name_is_never_in_two_slots() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    let made: Vec<u32> = (0..DEFAULT_POOLS)
        .map(|n| join(&pools, &format!("pool-{n}")).unwrap().0)
        .collect();
    // The last made went wherever a slot was left, likely far from the
    // start of its name's sequence; the slots before it are freed.
    let last = *made.last().unwrap();
    for index in &made[..made.len() - 1] {
        leave(&pools, *index);
    }
    let name = format!("pool-{}", DEFAULT_POOLS - 1);
    for _ in 0..3 {
        assert_eq!(join(&pools, &name).unwrap().0, last);
    }
    assert_eq!(pools.slots()[last as usize].members(), 4);
    assert_eq!(pools.in_use().len(), 1);
}

#[test]
fn a_pool_is_never_made_while_another_process_holds_the_lock_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    let held = pools.map.lock(std::time::Duration::ZERO).unwrap();
    let start = std::time::Instant::now();
    let refused = pools.join("p", || {
        pools.map.lock(std::time::Duration::from_millis(100))
    });
    assert_eq!(refused.err(), Some(JoinError::Locked));
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    drop(held);
    join(&pools, "p").unwrap();
    // Finding a running pool needs no lock.
    let _held = pools.map.lock(std::time::Duration::ZERO).unwrap();
    assert!(pools.join("p", || None::<()>).is_ok());
}

#[test]
fn joining_while_the_last_member_leaves_ends_in_one_counted_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pools = table(dir.path());
    for _ in 0..2000 {
        let (index, _) = join(&pools, "p").unwrap();
        let joined = std::thread::scope(|s| {
            let joiner = s.spawn(|| join(&pools, "p").unwrap());
            leave(&pools, index);
            joiner.join().unwrap()
        });
        let (index, slot) = joined;
        assert!(slot.in_use() && slot.name() == "p");
        assert_eq!(slot.members(), 1);
        assert_eq!(pools.in_use().len(), 1);
        leave(&pools, index);
        assert!(pools.in_use().is_empty());
    }
}
