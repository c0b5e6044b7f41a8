//! The pool table read from arbitrary contents, and joined without ever
//! looping on a slot in a state no vramshare writes.

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use vramshare_common::pool::{
    check_name, Pools, HEADER_LEN, MAGIC, NAME_BYTES, SLOT_SIZE, VERSION,
};
use vramshare_common::registry::NO_QUOTA;
use vramshare_common::size::{Device, MAX_DEVICES};

use super::buffer::{
    counter, get_u32, get_u64, header, put_u32, put_u64, slot_index, small, with_valid_header,
    Buffer,
};

// Where a slot keeps its fields (`PoolSlot`, repr(C)).
const STATE: usize = 0;
const NAME_LEN: usize = 4;
const NAME: usize = 8;
const BUDGET: usize = NAME + NAME_BYTES;
const DEVICE_BYTES: usize = BUDGET + 8 * MAX_DEVICES;
/// The member count, and its padding.
const MEMBERS: usize = DEVICE_BYTES + 8 * MAX_DEVICES;
const CLAIMING: u32 = 1;
const IN_USE: u32 = 2;

#[test]
fn the_slot_layout_is_the_one_assumed_here() {
    assert_eq!(SLOT_SIZE, MEMBERS + 8);
}

/// A slot in any state (but `CLAIMING` only where `claiming`), its name a
/// pool name or garbage, its counters at the edges.
fn slot(claiming: bool) -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), SLOT_SIZE),
        prop_oneof![Just(0u32), Just(CLAIMING), Just(IN_USE), any::<u32>()]
            .prop_filter("claiming", move |s| claiming || *s != CLAIMING),
        prop_oneof!["[a-c]{1,3}", ".{0,60}"],
        prop_oneof![Just(None), small().prop_map(Some)],
        proptest::array::uniform16(prop_oneof![Just(NO_QUOTA), counter()]),
        proptest::array::uniform16(counter()),
    )
        .prop_map(|(mut bytes, state, name, name_len, budgets, used)| {
            put_u32(&mut bytes, STATE, state);
            let name = &name.as_bytes()[..name.len().min(NAME_BYTES)];
            bytes[NAME..NAME + name.len()].copy_from_slice(name);
            put_u32(&mut bytes, NAME_LEN, name_len.unwrap_or(name.len() as u32));
            for d in 0..MAX_DEVICES {
                put_u64(&mut bytes, BUDGET + 8 * d, budgets[d]);
                put_u64(&mut bytes, DEVICE_BYTES + 8 * d, used[d]);
            }
            bytes
        })
}

fn table(slots: &[Vec<u8>]) -> Buffer {
    let mut bytes = header(MAGIC, VERSION, SLOT_SIZE, slots.len() as u64, HEADER_LEN);
    for slot in slots {
        bytes.extend_from_slice(slot);
    }
    Buffer::new(&bytes)
}

/// Found by `joining_a_corrupt_table_ends`: a slot in state 3 made `join`
/// spin forever, retrying a compare-exchange from "free".
#[test]
fn join_passes_over_slots_in_unknown_states() {
    let mut corrupt = vec![0u8; SLOT_SIZE];
    put_u32(&mut corrupt, STATE, 3);
    let pools = Pools::new(table(&[corrupt.clone(), corrupt.clone()])).unwrap();
    assert!(pools.join("a", || Some(())).is_err(), "no free slot");
    let pools = Pools::new(table(&[corrupt.clone(), vec![0u8; SLOT_SIZE], corrupt])).unwrap();
    let (index, pool) = pools.join("a", || Some(())).unwrap();
    assert_eq!(
        (index, pool.name(), pool.in_use()),
        (1, "a".to_string(), true)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_reader_stays_in_range(
        slots in proptest::collection::vec(slot(true), 0..8),
        size in counter(),
        leave in counter(),
        low in any::<bool>(),
    ) {
        let buffer = table(&slots);
        let base = buffer.as_ref().as_ptr();
        let pools = Pools::new(buffer).map_err(TestCaseError::fail)?;
        let in_use: Vec<usize> = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| get_u32(s, STATE) == IN_USE)
            .map(|(i, _)| i)
            .collect();
        let listed = pools.in_use();
        prop_assert_eq!(listed.iter().map(|(i, _)| *i as usize).collect::<Vec<_>>(), in_use.clone());
        for (index, slot) in &listed {
            prop_assert_eq!(slot_index(base, HEADER_LEN, SLOT_SIZE, slots.len(), *slot)?, *index as usize);
            let name = slot.name();
            prop_assert!(name.chars().count() <= NAME_BYTES);
            // The first pool of that name: this one or an earlier one.
            let (found, same) = pools.find(&name).unwrap();
            prop_assert!(found <= *index && same.name() == name);
            prop_assert_eq!(slot_index(base, HEADER_LEN, SLOT_SIZE, slots.len(), same)?, found as usize);
        }
        for index in (0..slots.len() as u32 + 2).chain([u32::MAX]) {
            let got = pools.get(index);
            prop_assert_eq!(got.is_some(), in_use.contains(&(index as usize)));
            if let Some(slot) = got {
                prop_assert_eq!(slot_index(base, HEADER_LEN, SLOT_SIZE, slots.len(), slot)?, index as usize);
            }
        }
        for (i, slot) in pools.slots().iter().enumerate() {
            let raw = &slots[i];
            for d in Device::all() {
                let budget = get_u64(raw, BUDGET + 8 * d.index());
                prop_assert_eq!(slot.budget(d), (budget != NO_QUOTA).then_some(budget));
                let before = slot.device_bytes(d);
                prop_assert_eq!(before, get_u64(raw, DEVICE_BYTES + 8 * d.index()));
                // Reserving on corrupt counters: refused or within the cap.
                if slot.try_reserve_as(d, size, low, leave) {
                    prop_assert_eq!(slot.device_bytes(d), before + size);
                    if budget != NO_QUOTA {
                        prop_assert!(before + size <= budget);
                    }
                    slot.unreserve(d, size);
                }
                slot.unreserve(d, u64::MAX);
                prop_assert_eq!(slot.device_bytes(d), 0);
            }
        }
    }

}

proptest! {
    // A join that never ends leaves its thread spinning: few shrinks.
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 8, ..ProptestConfig::default() })]

    /// A slot that is neither free, nor being claimed, nor in use is passed
    /// over like a taken one: joining always ends, in a pool of that name.
    #[test]
    fn joining_a_corrupt_table_ends(
        slots in proptest::collection::vec(slot(false), 0..8),
        name in "[a-c]{1,3}|[A-Za-z0-9._-]{1,48}",
    ) {
        prop_assert!(check_name(&name).is_ok());
        let (done, ended) = mpsc::channel();
        let wanted = name.clone();
        std::thread::spawn(move || {
            let pools = Pools::new(table(&slots)).unwrap();
            let joined = pools.join(&wanted, || Some(())).ok().map(|(i, s)| (i, s.name(), s.in_use(), slots.len()));
            let _ = done.send(joined);
        });
        let joined = ended.recv_timeout(Duration::from_secs(2));
        prop_assert!(joined.is_ok(), "join did not end in 2 s");
        if let Some((index, joined_name, in_use, count)) = joined.unwrap() {
            prop_assert!((index as usize) < count);
            prop_assert!(in_use);
            prop_assert_eq!(joined_name, name);
        }
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
        let pools = Pools::new(Buffer::at(&bytes, offset));
        if offset != 0 {
            prop_assert!(pools.is_err(), "a misaligned file is refused");
        }
        if let Ok(pools) = pools {
            for (_, slot) in pools.in_use() {
                let _ = pools.find(&slot.name());
            }
            let _ = (pools.get(0), pools.get(u32::MAX), pools.find(""));
        }
    }
}
