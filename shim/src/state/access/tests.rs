//! The access profile's unit tests.

use super::*;
use crate::state::ledger::Block;
use vramshare_common::event::{Api, Placement};

fn ledger_with(blocks: &[(usize, u64)]) -> Ledger {
    let ledger = Ledger::new(
        Vec::leak(vramshare_common::registry::local_counters()),
        None,
        false,
    );
    for (ptr, size) in blocks {
        let block = Block {
            size: *size,
            device: crate::config::Device::new(0).unwrap(),
            placement: Placement::Device,
            device_part: 0,
            api: Api::cudaMalloc,
            pool: 0,
            managed: false,
            moving: false,
            tiered: false,
        };
        ledger.insert(*ptr, block);
    }
    ledger
}

#[test]
fn a_stale_snapshot_leaves_the_ledger_to_find_a_block_made_since() {
    let ledger = ledger_with(&[]);
    let block = Block {
        size: 4 << 20,
        device: crate::config::Device::new(0).unwrap(),
        placement: Placement::Host,
        device_part: 0,
        api: Api::cudaMallocAsync,
        pool: 0,
        managed: false,
        moving: false,
        tiered: true,
    };
    let start = 0x7f00_0000_0000usize;
    ledger.insert(start, block);
    ledger.insert(
        start + (16 << 20),
        Block {
            tiered: false,
            ..block
        },
    );
    let (older, _) = index::rebuild(&Snapshot::empty(), 1, Vec::new(), 0);
    let mut naming = Naming::new(&older, &ledger, 2, false);
    for word in [start as u64 + 8, start as u64, start as u64 + (16 << 20), 7] {
        naming.word(word);
    }
    // The start of a tier block, only: not a pointer into it, not
    // another kind of block, not a word that is no address.
    assert_eq!(naming.unfound_blocks(&ledger).collect::<Vec<_>>(), [start]);
    // Where every use is logged, a block of any kind made since is named
    // by its start.
    let mut every = Naming::new(&older, &ledger, 2, true);
    for word in [start as u64 + (16 << 20) + 8, start as u64 + (16 << 20)] {
        every.word(word);
    }
    let unfound: Vec<_> = every.unfound_blocks(&ledger).collect();
    assert_eq!(unfound, [start + (16 << 20)]);
    // A snapshot as new as the ledger is not second-guessed.
    let mut current = Naming::new(&older, &ledger, 1, false);
    current.word(start as u64);
    assert_eq!(current.unfound_blocks(&ledger).count(), 0);
}

#[test]
fn words_read_from_a_struct_name_blocks_beyond_a_stale_snapshots_span() {
    // The snapshot knows one block; a block made since lies below it, and
    // another above: a struct of sizes and strides that names both among
    // its words (at every place of an eight-word chunk) finds each.
    let start = 0x7f00_4000_0000u64;
    let ledger = ledger_with(&[(start as usize, 2 << 20)]);
    let live = vec![(start as usize, 2 << 20, 0, false)];
    let (older, _) = index::rebuild(&Snapshot::empty(), ledger.generation(), live, 0);
    let (below, above) = (start - (64 << 20), start + (64 << 20));
    for at in [below, above] {
        ledger.insert(
            at as usize,
            Block {
                tiered: true,
                ..ledger.block_at(start as usize).unwrap()
            },
        );
    }
    for place in 0..19 {
        let mut words: Vec<u64> = (0..19).map(|word| word * 64 + 1).collect();
        words[place] = below;
        words[(place + 7) % 19] = above;
        words[(place + 3) % 19] = start + 8;
        let mut naming = Naming::new(&older, &ledger, ledger.generation(), false);
        // SAFETY: the vector's own bytes.
        unsafe { naming.words(words.as_ptr() as *const u8, words.len() * 8) };
        let mut unfound: Vec<_> = naming.unfound_blocks(&ledger).collect();
        unfound.sort();
        assert_eq!(unfound, [below as usize, above as usize], "at {place}");
        assert_eq!(naming.named().count(), 1, "at {place}");
    }
}

#[test]
fn a_launch_names_each_block_once_and_places_its_use() {
    let access = Access::default();
    let ledger = ledger_with(&[(0x10000, 0x1000), (0x20000, 0x1000)]);
    let mut recurrence = Recurrence::ZERO;
    let params: [u64; 5] = [7, 0x10008, 0x10010, 0x20fff, 0x30000];
    let kernel = (0x99, Launch::Kernel);
    let named = access.launch(
        &ledger,
        kernel,
        Some(&mut recurrence),
        5,
        |n| {
            // SAFETY: the array is 40 readable bytes.
            unsafe { n.words(params.as_ptr().cast(), 40) }
        },
        &mut Named::default(),
    );
    assert_eq!(named, 2, "two pointers into the first block count once");
    let profiles = access.index.profiles();
    assert!(profiles.iter().all(|p| p.uses() == 1 && p.stream() == 5));
    // A pointer at an offset that is not a multiple of 8 from its
    // parameter's start is not read (CUDA aligns pointers to 8).
    let bytes: [u8; 12] = {
        let mut b = [0u8; 12];
        b[4..12].copy_from_slice(&0x10000u64.to_le_bytes());
        b
    };
    let named = access.launch(
        &ledger,
        kernel,
        Some(&mut recurrence),
        5,
        |n| {
            // SAFETY: 12 readable bytes.
            unsafe { n.words(bytes.as_ptr(), 12) }
        },
        &mut Named::default(),
    );
    assert_eq!(named, 0);
    // A block freed is no longer named, once the index is rebuilt: 100
    // µs after the last rebuild, or a hundred times that rebuild's cost if
    // longer (on a loaded machine, a rebuild can take 100 µs and more, so
    // the launch is tried again for up to two seconds).
    let _ = ledger.take(0x20000);
    let began = std::time::Instant::now();
    let named = loop {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let named = access.launch(
            &ledger,
            kernel,
            None,
            5,
            |n| n.word(0x20008),
            &mut Named::default(),
        );
        if named == 0 || began.elapsed() > std::time::Duration::from_secs(2) {
            break named;
        }
    };
    assert_eq!(named, 0);
}

#[test]
fn the_step_before_predicts_the_next_use_and_the_least_recent_ranks_last() {
    use profile::BlockProfile;
    use steps::Place;
    let at = |step, position| Place { step, position };
    let touch = |profile: &BlockProfile, step, positions: &[u64]| {
        for p in positions {
            profile.touch(at(step, *p), 0, profile::VIA_KERNEL, false);
        }
    };
    // Used at 10 and 90 in step 1, not yet in step 2.
    let late = BlockProfile::new(0x1000, 4096, 0, 0);
    touch(&late, 1, &[10, 90]);
    // Used at 20, 30, 40 in step 1, and at 20 in step 2.
    let busy = BlockProfile::new(0x2000, 4096, 0, 0);
    touch(&busy, 1, &[20, 30, 40]);
    touch(&busy, 2, &[20]);
    // Step 2, now at 25, steps of 100 launches.
    assert_eq!(
        next_use(&late, at(2, 25), 100),
        40,
        "its mean gap: (90 - 10) / 2"
    );
    assert_eq!(
        next_use(&late, at(2, 5), 100),
        5,
        "its first use, still ahead"
    );
    assert_eq!(
        next_use(&busy, at(2, 25), 100),
        6,
        "in its busy span: (40 - 20) / 3"
    );
    assert_eq!(
        next_use(&busy, at(2, 50), 100),
        70,
        "all its uses behind: its first of the next step"
    );
    let never = BlockProfile::new(0x3000, 4096, 0, 0);
    assert_eq!(next_use(&never, at(2, 25), 100), u64::MAX);
    // Without marked steps: the least recently used ranks greatest.
    assert!(least_recent_first(&late) > least_recent_first(&busy));
    assert_eq!(least_recent_first(&never), u64::MAX);
}
