//! The trace ring read from arbitrary contents: heads and stamps near 2^63
//! and 2^64 (where the stamps `2p+1`, `2p+2` overflow), arbitrary cursors.

use memmap2::MmapMut;
use proptest::prelude::*;
use vramshare_common::event::Event;
use vramshare_common::ring::{
    Cursor, Read, Ring, HEADER_LEN, MAGIC, POSITIONS, SLOT_SIZE, VERSION,
};

use super::buffer::{counter, get_u64, header, put_u64, Buffer};

const HEAD: usize = 64;
const DROPPED: usize = 128;

/// A ring of `1 << log` slots whose head is `head` and whose stamps are
/// mostly those of positions around it (written, being written, a lap
/// ahead or behind), sometimes anything.
fn ring() -> impl Strategy<Value = Vec<u8>> {
    (0..5u32, counter(), counter()).prop_flat_map(|(log, head, dropped)| {
        let count = 1usize << log;
        let stamp = prop_oneof![
            counter(),
            (0..3 * count as u64, 0..3u64).prop_map(move |(back, kind)| {
                let position = head.saturating_sub(back);
                position.wrapping_mul(2).wrapping_add(kind)
            }),
        ];
        (
            proptest::collection::vec(stamp, count),
            proptest::collection::vec(any::<u8>(), count * SLOT_SIZE),
        )
            .prop_map(move |(stamps, slots)| {
                let mut bytes = header(MAGIC, VERSION, SLOT_SIZE, count as u64, HEADER_LEN);
                put_u64(&mut bytes, HEAD, head);
                put_u64(&mut bytes, DROPPED, dropped);
                bytes.extend_from_slice(&slots);
                for (slot, stamp) in stamps.iter().enumerate() {
                    put_u64(&mut bytes, HEADER_LEN + slot * SLOT_SIZE, *stamp);
                }
                bytes
            })
    })
}

/// Whether position `p` of these ring bytes holds a whole event.
fn written(bytes: &[u8], count: u64, p: u64) -> bool {
    let stamp = get_u64(bytes, HEADER_LEN + (p % count) as usize * SLOT_SIZE);
    p < POSITIONS && stamp == 2 * p + 2
}

fn cursor() -> impl Strategy<Value = Option<Cursor>> {
    prop_oneof![
        Just(None),
        (counter(), counter(), counter()).prop_map(|(next, read, lost)| Some(Cursor {
            next,
            read,
            lost
        })),
    ]
}

/// Found by `arbitrary_files_are_refused_or_read`: a buffer not 8-byte
/// aligned was accepted, and its words then read as atomics in place.
#[test]
fn a_misaligned_ring_is_refused() {
    let bytes = header(MAGIC, VERSION, SLOT_SIZE, 1, HEADER_LEN + SLOT_SIZE);
    assert!(Ring::new(Buffer::new(&bytes)).is_ok());
    let error = Ring::new(Buffer::at(&bytes, 4)).err().unwrap();
    assert!(error.contains("misaligned"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn draining_a_corrupt_ring_ends_and_accounts_every_position(
        bytes in ring(),
        start in cursor(),
        finish in any::<bool>(),
        probe in counter(),
    ) {
        let ring = Ring::new(Buffer::new(&bytes)).map_err(TestCaseError::fail)?;
        let count = ring.capacity();
        prop_assert_eq!(ring.head(), get_u64(&bytes, HEAD));
        prop_assert_eq!(ring.dropped(), get_u64(&bytes, DROPPED));
        let head = ring.head().min(POSITIONS);
        let oldest_cursor = Cursor::oldest(&ring);
        prop_assert_eq!(oldest_cursor.next, head.saturating_sub(count));
        let mut cursor = start.unwrap_or(oldest_cursor);
        let before = cursor.clone();
        let mut out = Vec::new();
        cursor.drain(&ring, &mut out, finish);
        let oldest = head.saturating_sub(count);
        let from = before.next.max(oldest);
        prop_assert!(cursor.next >= from && cursor.next <= head.max(before.next));
        prop_assert!(out.len() as u64 <= count);
        // Every position passed is read or lost; only written ones are read.
        let passed = cursor.next - before.next;
        let counted = (cursor.read - before.read) + (cursor.lost - before.lost);
        if before.read.checked_add(count).is_some() && before.lost.checked_add(passed).is_some() {
            prop_assert_eq!(counted, passed);
        }
        let expected = (from..cursor.next).filter(|&p| written(&bytes, count, p)).count();
        prop_assert_eq!(out.len(), expected);
        if finish {
            prop_assert_eq!(cursor.next, head.max(before.next));
        }
        match ring.read_at(probe) {
            Read::Event(_) => prop_assert!(written(&bytes, count, probe)),
            Read::Lost | Read::NotYet => prop_assert!(!written(&bytes, count, probe)),
        }
    }

    /// A writer handed a position past the last stamp, or a slot in any
    /// state, drops or writes its event; what it writes reads back.
    #[test]
    fn pushing_onto_a_corrupt_ring_writes_or_drops(bytes in ring()) {
        let mut map = MmapMut::map_anon(bytes.len()).unwrap();
        map.copy_from_slice(&bytes);
        let ring = Ring::new(map).map_err(TestCaseError::fail)?;
        let position = ring.head();
        let dropped = ring.dropped();
        let stamp = get_u64(&bytes, HEADER_LEN + (position & (ring.capacity() - 1)) as usize * SLOT_SIZE);
        let event = Event { t_ns: 42, ..Event::default() };
        let pushed = ring.push(&event);
        prop_assert_eq!(ring.head(), position.wrapping_add(1));
        let free = position < POSITIONS && stamp & 1 == 0 && stamp < 2 * position + 2;
        prop_assert_eq!(pushed, free);
        if pushed {
            prop_assert_eq!(ring.read_at(position), Read::Event(Event { seq: position, ..event }));
        } else {
            prop_assert_eq!(ring.dropped(), dropped.wrapping_add(1));
        }
    }

    #[test]
    fn arbitrary_files_are_refused_or_read(
        bytes in proptest::collection::vec(any::<u8>(), 0..HEADER_LEN + 9 * SLOT_SIZE),
        valid_header in any::<bool>(),
        count in prop_oneof![Just(None), counter().prop_map(Some), (0..10u64).prop_map(Some)],
        head in counter(),
        offset in 0..8usize,
        probe in counter(),
    ) {
        let mut bytes = bytes;
        if valid_header && bytes.len() >= HEADER_LEN {
            // No count: the largest that fits (the bytes cut to it).
            let slots = (bytes.len() - HEADER_LEN) / SLOT_SIZE;
            let fits = if slots == 0 { 0 } else { 1 << slots.ilog2() };
            bytes.truncate(HEADER_LEN + fits * SLOT_SIZE);
            let count = count.unwrap_or(fits as u64);
            bytes[..24].copy_from_slice(&header(MAGIC, VERSION, SLOT_SIZE, count, 24));
            put_u64(&mut bytes, HEAD, head);
        }
        let ring = Ring::new(Buffer::at(&bytes, offset));
        if offset != 0 {
            prop_assert!(ring.is_err(), "a misaligned file is refused");
        }
        let whole = bytes.len() >= HEADER_LEN && {
            let count = get_u64(&bytes, 16);
            count.is_power_of_two()
                && count.checked_mul(SLOT_SIZE as u64) == Some((bytes.len() - HEADER_LEN) as u64)
        };
        if valid_header {
            prop_assert_eq!(ring.is_ok(), whole && offset == 0);
        }
        if let Ok(ring) = ring {
            let _ = (ring.head(), ring.dropped(), ring.read_at(probe));
            let mut out = Vec::new();
            Cursor::oldest(&ring).drain(&ring, &mut out, false);
            Cursor::default().drain(&ring, &mut out, true);
        }
    }
}
