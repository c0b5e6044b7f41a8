//! The process registry read from arbitrary contents: slots of this
//! (live) process, of dead ones and of garbage, with counters at the edges.

use proptest::prelude::*;
use vramshare_common::process;
use vramshare_common::registry::{Registry, CMDLINE_BYTES, HEADER_LEN, MAGIC, SLOT_SIZE, VERSION};
use vramshare_common::settings::Priority;
use vramshare_common::size::MAX_DEVICES;

use super::buffer::{
    counter, get_u32, get_u64, header, put_u32, put_u64, slot_index, small, with_valid_header,
    Buffer,
};

// Where a slot keeps what the readers look at (`ProcessSlot`, repr(C)).
const STATE: usize = 0;
const PID: usize = 4;
const START: usize = 8;
const CMDLINE_LEN: usize = 20;
const POOL: usize = 32;
const PRIORITY: usize = 36;
/// After the device count, its padding, the launch count and the uses.
const DEVICES: usize = 72 + CMDLINE_BYTES;
const DEVICE_SIZE: usize = 96;
const WANTED: usize = 72;
const LIVE: u32 = 2;
const EXITED: u32 = 3;

#[test]
fn the_slot_layout_is_the_one_assumed_here() {
    assert_eq!(SLOT_SIZE, DEVICES + MAX_DEVICES * DEVICE_SIZE);
}

fn me() -> (u32, u64) {
    let pid = std::process::id();
    (pid, process::start_time(pid).unwrap())
}

/// One slot: garbage, then the fields that decide what readers do.
fn slot() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), SLOT_SIZE),
        prop_oneof![1 => Just(0u32), 1 => Just(1), 3 => Just(LIVE), 1 => Just(EXITED), 1 => any::<u32>()],
        proptest::bool::weighted(0.7),
        proptest::bool::weighted(0.7),
        // Few pools and priorities, so that slots share them and their asks add up.
        (few(), few(), small()),
        proptest::array::uniform16(prop_oneof![Just(0u64), counter()]),
    )
        .prop_map(|(mut bytes, state, my_pid, my_start, (pool, priority, len), wanted)| {
            let (pid, start) = me();
            put_u32(&mut bytes, STATE, state);
            if my_pid {
                put_u32(&mut bytes, PID, pid);
            }
            if my_start {
                put_u64(&mut bytes, START, start);
            }
            put_u32(&mut bytes, POOL, pool);
            put_u32(&mut bytes, PRIORITY, priority);
            put_u32(&mut bytes, CMDLINE_LEN, len);
            for (device, ask) in wanted.iter().enumerate() {
                put_u64(&mut bytes, DEVICES + device * DEVICE_SIZE + WANTED, *ask);
            }
            bytes
        })
}

fn few() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0..3u32, 1 => small()]
}

/// What a reader should make of one slot.
struct Model {
    state: u32,
    pid: u32,
    alive: bool,
    pool: u32,
    priority: u32,
    wanted: [u64; MAX_DEVICES],
}

fn model(slot: &[u8]) -> Model {
    let pid = get_u32(slot, PID);
    Model {
        state: get_u32(slot, STATE),
        pid,
        alive: process::is_alive(pid, get_u64(slot, START)),
        pool: get_u32(slot, POOL),
        priority: get_u32(slot, PRIORITY),
        wanted: std::array::from_fn(|d| get_u64(slot, DEVICES + d * DEVICE_SIZE + WANTED)),
    }
}

fn in_pool(slot: &Model, index: u32) -> bool {
    slot.state == LIVE && slot.pool.checked_sub(1) == Some(index)
}

/// Every reader over a registry of these slots, against the model.
fn check(slots: &[Vec<u8>], indices: &[u32]) -> Result<(), TestCaseError> {
    let mut bytes = header(MAGIC, VERSION, SLOT_SIZE, slots.len() as u64, HEADER_LEN);
    for slot in slots {
        bytes.extend_from_slice(slot);
    }
    let models: Vec<Model> = slots.iter().map(|s| model(s)).collect();
    let buffer = Buffer::new(&bytes);
    let base = buffer.as_ref().as_ptr();
    let registry = Registry::new(buffer).map_err(TestCaseError::fail)?;
    let live = registry.live();
    let expected: Vec<u32> = models
        .iter()
        .filter(|m| m.state == LIVE && m.alive)
        .map(|m| m.pid)
        .collect();
    prop_assert_eq!(live.iter().map(|p| p.pid).collect::<Vec<_>>(), expected);
    let gone = registry.gone();
    let exited = models.iter().filter(|m| m.state == EXITED).count();
    let dead = models
        .iter()
        .filter(|m| m.state == LIVE && !m.alive)
        .count();
    prop_assert_eq!(gone.len(), exited + dead);
    for info in live.iter().chain(&gone) {
        prop_assert!(info.cmdline.chars().count() <= CMDLINE_BYTES);
        prop_assert!(info
            .devices
            .iter()
            .all(|(d, _)| (*d as usize) < MAX_DEVICES));
    }
    let (pid, _) = me();
    let found = registry.live_slot(pid);
    let first = models
        .iter()
        .position(|m| m.state == LIVE && m.pid == pid && m.alive);
    match found {
        Some(slot) => {
            let index = slot_index(base, HEADER_LEN, SLOT_SIZE, slots.len(), slot)?;
            prop_assert_eq!(Some(index), first);
        }
        None => prop_assert_eq!(first, None),
    }
    // Each slot is in one pool at most, so no slot is reaped twice below.
    for &index in indices {
        for priority in [Priority::Low, Priority::Normal, Priority::High] {
            let mut expected = [0u64; MAX_DEVICES];
            for m in models
                .iter()
                .filter(|m| in_pool(m, index) && m.priority == priority.code())
            {
                if m.alive && m.wanted.iter().any(|&w| w != 0) {
                    for (total, ask) in expected.iter_mut().zip(m.wanted) {
                        *total = total.saturating_add(ask);
                    }
                }
            }
            prop_assert_eq!(registry.wanted_in_pool(index, priority), expected);
        }
        let mut reaped = Vec::new();
        registry.reap_dead(index, |slot| reaped.push(slot as *const _ as usize));
        let mut expected = Vec::new();
        for (i, m) in models.iter().enumerate() {
            if in_pool(m, index) && !m.alive {
                expected.push(base as usize + HEADER_LEN + i * SLOT_SIZE);
            }
        }
        prop_assert_eq!(reaped, expected, "pool {}", index);
    }
    // Reaping marks slots exited: they stay gone, never come back live.
    prop_assert_eq!(registry.gone().len(), exited + dead);
    prop_assert_eq!(registry.live().len(), live.len());
    Ok(())
}

/// Found by the properties below: asks near 2^64 overflowed their sum, and
/// pool index u32::MAX overflowed `index + 1`.
#[test]
fn asks_near_2_64_saturate_and_the_last_pool_index_matches_no_slot() {
    let (pid, start) = me();
    let member = |pool: u32, ask: u64| {
        let mut bytes = vec![0u8; SLOT_SIZE];
        put_u32(&mut bytes, STATE, LIVE);
        put_u32(&mut bytes, PID, pid);
        put_u64(&mut bytes, START, start);
        put_u32(&mut bytes, POOL, pool);
        put_u32(&mut bytes, PRIORITY, 2);
        put_u64(&mut bytes, DEVICES + WANTED, ask);
        bytes
    };
    let slots = [member(1, u64::MAX - 1), member(1, 5), member(0, 7)];
    let mut bytes = header(MAGIC, VERSION, SLOT_SIZE, 3, HEADER_LEN);
    slots.iter().for_each(|s| bytes.extend_from_slice(s));
    let registry = Registry::new(Buffer::new(&bytes)).unwrap();
    assert_eq!(registry.wanted_in_pool(0, Priority::High)[0], u64::MAX);
    assert_eq!(
        registry.wanted_in_pool(u32::MAX, Priority::High),
        [0; MAX_DEVICES],
        "pool 0 is no pool"
    );
    let mut reaped = 0;
    registry.reap_dead(u32::MAX, |_| reaped += 1);
    assert_eq!((reaped, registry.live().len()), (0, 3));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn slots_with_arbitrary_contents_are_read_without_panicking(
        slots in proptest::collection::vec(slot(), 0..6),
        extra in proptest::collection::vec(small(), 0..3),
    ) {
        // The pools the slots name, and others, u32::MAX among them.
        let mut indices: Vec<u32> = slots.iter().map(|s| get_u32(s, POOL).wrapping_sub(1)).collect();
        indices.extend(extra);
        indices.push(u32::MAX);
        let mut seen = std::collections::HashSet::new();
        indices.retain(|i| seen.insert(*i));
        check(&slots, &indices)?;
    }

    #[test]
    fn arbitrary_files_are_refused_or_read(
        bytes in proptest::collection::vec(any::<u8>(), 0..4 * SLOT_SIZE),
        valid_header in any::<bool>(),
        count in prop_oneof![Just(None), counter().prop_map(Some)],
        offset in 0..8usize,
    ) {
        let mut bytes = bytes;
        if valid_header {
            with_valid_header(&mut bytes, (MAGIC, VERSION, SLOT_SIZE, HEADER_LEN), count);
        }
        let registry = Registry::new(Buffer::at(&bytes, offset));
        let fits = bytes.len() >= HEADER_LEN
            && get_u64(&bytes, 16).checked_mul(SLOT_SIZE as u64)
                == Some((bytes.len() - HEADER_LEN) as u64);
        if offset != 0 {
            prop_assert!(registry.is_err(), "a misaligned file is refused");
        }
        if let Ok(registry) = registry {
            prop_assert!(fits);
            let _ = (registry.live(), registry.gone(), registry.live_slot(std::process::id()));
            let _ = registry.wanted_in_pool(0, Priority::Normal);
            let _ = registry.wanted_in_pool(u32::MAX, Priority::Low);
            registry.reap_dead(u32::MAX, |_| {});
            registry.reap_dead(0, |_| {});
        }
    }
}
