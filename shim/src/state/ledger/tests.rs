//! The ledger's reservations, records and move candidates.

use super::*;

fn dev(number: u32) -> Device {
    Device::new(number).unwrap()
}

fn block(size: u64, placement: Placement) -> Block {
    Block {
        size,
        device: dev(0),
        placement,
        device_part: 0,
        api: Api::cudaMalloc,
        pool: 0,
        managed: placement == Placement::Host,
        moving: false,
        tiered: false,
    }
}

fn ledger() -> Ledger {
    Ledger::new(
        Vec::leak(vramshare_common::registry::local_counters()),
        None,
        false,
    )
}

#[test]
fn reservations_never_pass_the_quota() {
    let ledger = ledger();
    assert!(ledger.try_reserve(dev(0), 60, 100));
    assert!(!ledger.try_reserve(dev(0), 41, 100));
    assert!(ledger.try_reserve(dev(0), 40, 100));
    assert!(!ledger.try_reserve(dev(0), u64::MAX, u64::MAX));
    ledger.unreserve(dev(0), 1000);
    assert_eq!(
        ledger.device(dev(0)).device_bytes.load(Ordering::Relaxed),
        0,
        "saturates at zero"
    );
    assert_eq!(
        ledger.device(dev(0)).peak_device.load(Ordering::Relaxed),
        100
    );
}

#[test]
fn take_releases_what_was_recorded() {
    let ledger = ledger();
    ledger.reserve(dev(0), 10);
    ledger.insert(0x1000, block(10, Placement::Device));
    ledger.insert(0x2000, block(30, Placement::Host));
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        30
    );
    assert!(matches!(ledger.take(0x1000), Taken::Block(b) if b.size == 10));
    assert!(matches!(ledger.take(0x1000), Taken::Unknown));
    assert!(matches!(ledger.take(0x2000), Taken::Block(b) if b.placement == Placement::Host));
    assert_eq!(
        ledger.device(dev(0)).device_bytes.load(Ordering::Relaxed),
        0
    );
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        0
    );
    assert!(ledger.promotion_candidates(dev(0), u64::MAX).is_empty());
}

#[test]
fn promotion_picks_largest_blocks_that_fit() {
    let ledger = ledger();
    for (ptr, size) in [(0x1, 50), (0x2, 30), (0x3, 20), (0x4, 80)] {
        ledger.insert(ptr, block(size, Placement::Host));
    }
    assert_eq!(
        ledger.promotion_candidates(dev(0), 75),
        vec![(50, 0x1), (20, 0x3)]
    );
    assert_eq!(
        ledger.begin_promotion(0x1, 49),
        None,
        "another block at that address"
    );
    assert_eq!(ledger.begin_promotion(0x1, 50), Some((Api::cudaMalloc, 0)));
    assert_eq!(ledger.begin_promotion(0x1, 50), None, "already moving");
    assert!(matches!(ledger.take(0x1), Taken::Moving));
    ledger.end_move(0x1);
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        130
    );
    assert!(matches!(ledger.take(0x1), Taken::Block(b) if b.placement == Placement::Device));
}

#[test]
fn a_split_block_counts_its_head_on_the_device_and_its_tail_spilled() {
    let ledger = ledger();
    assert!(ledger.try_reserve(dev(0), 8, 100));
    ledger.insert(
        0x10,
        Block {
            device_part: 8,
            ..block(24, Placement::Host)
        },
    );
    assert_eq!(
        ledger.device(dev(0)).device_bytes.load(Ordering::Relaxed),
        8
    );
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        16
    );
    assert_eq!(
        ledger.promotion_candidates(dev(0), 20),
        vec![(16, 0x10)],
        "the tail is what moves"
    );
    assert!(ledger.try_reserve(dev(0), 16, 100));
    assert_eq!(
        ledger.begin_promotion(0x10, 16),
        Some((Api::cudaMalloc, 8)),
        "the tail starts 8 bytes in"
    );
    ledger.end_move(0x10);
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        0
    );
    assert!(
        matches!(ledger.take(0x10), Taken::Block(b) if b.placement == Placement::Device && b.device_part == 24)
    );
    assert_eq!(
        ledger.device(dev(0)).device_bytes.load(Ordering::Relaxed),
        0
    );

    // Freed while still split: both parts come back.
    assert!(ledger.try_reserve(dev(0), 8, 100));
    ledger.insert(
        0x20,
        Block {
            device_part: 8,
            ..block(24, Placement::Host)
        },
    );
    assert!(matches!(ledger.take(0x20), Taken::Block(_)));
    assert_eq!(
        ledger.device(dev(0)).device_bytes.load(Ordering::Relaxed),
        0
    );
    assert_eq!(
        ledger.device(dev(0)).spilled_bytes.load(Ordering::Relaxed),
        0
    );
}
