//! The trace ring from any bytes (head and dropped counters included):
//! the readers, a drain from the oldest position and from 0, and a push.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memmap2::MmapMut;
use vramshare_common::event::Event;
use vramshare_common::ring::{
    Cursor, Read, Ring, HEADER_LEN, MAGIC, POSITIONS, SLOT_SIZE, VERSION,
};
use vramshare_fuzz::{file, Aligned};

fuzz_target!(|data: &[u8]| {
    let count = |n: usize| if n == 0 { 0 } else { 1 << n.ilog2() };
    let Some((flags, bytes)) = file(data, MAGIC, VERSION, HEADER_LEN, SLOT_SIZE, count) else {
        return;
    };
    let Ok(ring) = Ring::new(Aligned::new(&bytes)) else {
        return;
    };
    let head = ring.head().min(POSITIONS);
    let _ = ring.dropped();
    for finish in [false, true] {
        let mut cursor = Cursor::oldest(&ring);
        let mut out = Vec::new();
        cursor.drain(&ring, &mut out, finish);
        assert!(out.len() as u64 <= ring.capacity());
        assert!(cursor.next <= head);
    }
    let mut from_zero = Cursor::default();
    from_zero.drain(&ring, &mut Vec::new(), flags & 2 == 2);
    let _ = (
        ring.read_at(head),
        ring.read_at(u64::MAX),
        ring.read_at(POSITIONS - 1),
    );
    let mut map = MmapMut::map_anon(bytes.len()).unwrap();
    map.copy_from_slice(&bytes);
    let writer = Ring::new(map).unwrap();
    let position = writer.head();
    if writer.push(&Event::default()) {
        assert!(matches!(writer.read_at(position), Read::Event(e) if e.seq == position));
    }
});
