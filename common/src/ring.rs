//! The trace ring: one `mmap`ed file of fixed-size event slots, written by
//! every vramshare process of the user at once and read by `vramshare dump`.
//!
//! Layout (native byte order; `ring` in `VRAMSHARE_DIR`):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `VSHRING1` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | slot size (64) |
//! | 16 | 8 | slot count (a power of two) |
//! | 64 | 8 | head: positions handed out so far (its own cache line) |
//! | 128 | 8 | dropped: events a writer gave up on (its own cache line) |
//! | 192 | 64 × count | slots |
//!
//! A slot is a stamp and the 7 words of an [`Event`]. Writing position `p`
//! (taken with one `fetch_add` on head) goes to slot `p mod count`: the
//! writer moves the stamp from an older "done" value to `2p+1` (being
//! written) with a compare-exchange, stores the words, then stores `2p+2`
//! (done). A writer never waits: if the slot is still being written by a
//! writer a whole lap behind, the event is dropped and counted. A reader of
//! position `p` takes the event only if the stamp reads `2p+2` before and
//! after copying the words; a larger stamp means it was overwritten (lost),
//! a smaller one that it is not written yet.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::event::{Event, EVENT_WORDS};
use crate::files::SharedFile;

pub const MAGIC: u64 = u64::from_ne_bytes(*b"VSHRING1");
pub const VERSION: u32 = 1;
pub const SLOT_SIZE: usize = 64;
pub const HEADER_LEN: usize = 192;
/// 65,536 events, 4 MiB.
pub const DEFAULT_SLOTS: u64 = 1 << 16;

#[repr(C)]
struct Slot {
    stamp: AtomicU64,
    words: [AtomicU64; EVENT_WORDS],
}
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_SIZE);

/// The ring file's layout, for [`crate::files`].
pub struct RingFile;

impl SharedFile for RingFile {
    const NAME: &'static str = "ring";
    const WHAT: &'static str = "trace ring";
    const MAGIC: u64 = MAGIC;
    const VERSION: u32 = VERSION;
    const HEADER_LEN: usize = HEADER_LEN;
    const SLOT_SIZE: usize = SLOT_SIZE;
    const SLOTS: u64 = DEFAULT_SLOTS;
    fn check_count(count: u64) -> Result<(), String> {
        if count.is_power_of_two() {
            Ok(())
        } else {
            Err(format!(
                "trace ring of {count} slots, not a power of two: corrupt"
            ))
        }
    }
}

/// A mapped, checked ring (for writing with `MmapMut`, for reading with
/// either mapping).
pub struct Ring<M> {
    map: M,
    mask: u64,
}

/// What a reader found at one position.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    Event(Event),
    /// Overwritten by a later lap, or dropped by its writer.
    Lost,
    /// Not written yet (or being written right now).
    NotYet,
}

/// Positions a stamp can name: `done(p)` is `2p+2`, which fits in 64 bits
/// only below this. A head beyond it is corrupt (writers would need
/// centuries to get there): readers stop at it instead of overflowing, a
/// position beyond it reads as lost, and a writer handed one drops its event.
pub const POSITIONS: u64 = u64::MAX / 2;

/// The stamps of a position below [`POSITIONS`].
const fn done(position: u64) -> u64 {
    2 * position + 2
}
const fn writing(position: u64) -> u64 {
    2 * position + 1
}

impl<M: AsRef<[u8]>> Ring<M> {
    /// Wraps a mapping that [`RingFile::validate`] accepts.
    pub fn new(map: M) -> Result<Ring<M>, String> {
        let count = RingFile::validate(map.as_ref())?;
        Ok(Ring {
            map,
            mask: count - 1,
        })
    }

    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offsets are inside the checked mapping and 8-aligned (the
        // mapping is page-aligned); the memory is only accessed atomically.
        unsafe { &*(self.map.as_ref().as_ptr().add(offset) as *const AtomicU64) }
    }

    fn slot(&self, position: u64) -> &Slot {
        let offset = HEADER_LEN + SLOT_SIZE * (position & self.mask) as usize;
        // SAFETY: as in `word`; a slot is 64 bytes of atomics.
        unsafe { &*(self.map.as_ref().as_ptr().add(offset) as *const Slot) }
    }

    /// Positions handed out so far: every event ever pushed, kept or not.
    pub fn head(&self) -> u64 {
        self.word(64).load(Ordering::Acquire)
    }

    /// Events writers gave up on (their slot was busy a whole lap late).
    pub fn dropped(&self) -> u64 {
        self.word(128).load(Ordering::Relaxed)
    }

    /// [`Ring::head`] as far as readers go: never past [`POSITIONS`].
    fn readable_head(&self) -> u64 {
        self.head().min(POSITIONS)
    }

    pub fn read_at(&self, position: u64) -> Read {
        if position >= POSITIONS {
            return Read::Lost;
        }
        let slot = self.slot(position);
        let before = slot.stamp.load(Ordering::Acquire);
        if before < done(position) {
            return Read::NotYet;
        }
        if before > done(position) {
            return Read::Lost;
        }
        let mut words = [0u64; EVENT_WORDS];
        for (word, cell) in words.iter_mut().zip(&slot.words) {
            *word = cell.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if slot.stamp.load(Ordering::Relaxed) != before {
            return Read::Lost;
        }
        Read::Event(Event::from_words(words))
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Ring<M> {
    /// Appends an event (its `seq` becomes its position in the ring). Never
    /// blocks; false if the event was dropped.
    pub fn push(&self, event: &Event) -> bool {
        let position = self.word(64).fetch_add(1, Ordering::AcqRel);
        if position >= POSITIONS {
            self.word(128).fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let slot = self.slot(position);
        let mut current = slot.stamp.load(Ordering::Acquire);
        loop {
            // Busy (odd), or already written by a later lap: give up.
            if current & 1 == 1 || current >= done(position) {
                self.word(128).fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match slot.stamp.compare_exchange_weak(
                current,
                writing(position),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        let mut event = *event;
        event.seq = position;
        for (cell, word) in slot.words.iter().zip(event.to_words()) {
            cell.store(word, Ordering::Relaxed);
        }
        slot.stamp.store(done(position), Ordering::Release);
        true
    }
}

/// A reader's place in the ring, and what it has counted.
#[derive(Debug, Default, Clone)]
pub struct Cursor {
    pub next: u64,
    pub read: u64,
    pub lost: u64,
}

impl Cursor {
    /// A cursor at the oldest position the ring still holds.
    pub fn oldest<M: AsRef<[u8]>>(ring: &Ring<M>) -> Cursor {
        Cursor {
            next: ring.readable_head().saturating_sub(ring.capacity()),
            ..Cursor::default()
        }
    }

    /// Reads what has been written since the last call into `out`. Without
    /// `finish`, stops at the first position not yet written; with it,
    /// counts such positions as lost (use once writers are done, or for a
    /// one-off snapshot).
    pub fn drain<M: AsRef<[u8]>>(&mut self, ring: &Ring<M>, out: &mut Vec<Event>, finish: bool) {
        let head = ring.readable_head();
        let oldest = head.saturating_sub(ring.capacity());
        // Saturating: the fields are the caller's, and may start anywhere.
        if self.next < oldest {
            self.lost = self.lost.saturating_add(oldest - self.next);
            self.next = oldest;
        }
        while self.next < head {
            match ring.read_at(self.next) {
                Read::Event(event) => {
                    out.push(event);
                    self.read = self.read.saturating_add(1);
                }
                Read::Lost => self.lost = self.lost.saturating_add(1),
                Read::NotYet if finish => self.lost = self.lost.saturating_add(1),
                Read::NotYet => break,
            }
            self.next += 1;
        }
    }
}

/// A load event whose `ptr` and `size` are derived from its pid and counter
/// (`t_ns`): for tests and benchmarks that must tell a torn event.
pub fn load_event(pid: u32, n: u64) -> Event {
    let (ptr, size) = load_payload(pid, n);
    Event::new(
        0,
        n,
        pid,
        pid,
        crate::event::Op::Alloc,
        crate::event::Api::cudaMalloc,
        (n % 8) as i32,
        ptr,
        size,
        crate::event::Placement::Device,
        0,
    )
}

fn load_payload(pid: u32, n: u64) -> (u64, u64) {
    let mixed = (n ^ ((pid as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed, !mixed.rotate_left(17))
}

/// Whether an event made by [`load_event`] is whole.
pub fn check_load_event(event: &Event) -> bool {
    let expected = load_event(event.pid, event.t_ns);
    Event {
        seq: event.seq,
        ..expected
    } == *event
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::open_or_create;

    fn event(n: u64) -> Event {
        load_event(1, n)
    }

    #[test]
    fn pushes_are_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Ring::new(open_or_create::<RingFile>(dir.path()).unwrap()).unwrap();
        for n in 0..10 {
            assert!(ring.push(&event(n)));
        }
        let mut cursor = Cursor::default();
        let mut out = Vec::new();
        cursor.drain(&ring, &mut out, false);
        assert_eq!(out.len(), 10);
        assert_eq!(out[3].seq, 3);
        assert_eq!(out[3].t_ns, 3);
        assert_eq!((cursor.read, cursor.lost), (10, 0));
        assert_eq!(ring.read_at(10), Read::NotYet);
    }

    #[test]
    fn overwritten_events_are_counted_lost() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Ring::new(open_or_create::<RingFile>(dir.path()).unwrap()).unwrap();
        let total = ring.capacity() + 100;
        for n in 0..total {
            ring.push(&event(n));
        }
        let mut cursor = Cursor::default();
        let mut out = Vec::new();
        cursor.drain(&ring, &mut out, false);
        assert_eq!(cursor.lost, 100);
        assert_eq!(cursor.read, ring.capacity());
        assert_eq!(out[0].t_ns, 100);
        assert_eq!(ring.read_at(0), Read::Lost);
    }

    #[test]
    fn a_corrupt_head_past_the_last_stamp_is_read_as_lost() {
        let dir = tempfile::tempdir().unwrap();
        let ring = Ring::new(open_or_create::<RingFile>(dir.path()).unwrap()).unwrap();
        for head in [POSITIONS - 1, POSITIONS, 1 << 63, u64::MAX - 1, u64::MAX] {
            ring.word(64).store(head, Ordering::Relaxed);
            let mut cursor = Cursor::oldest(&ring);
            assert_eq!(cursor.next, POSITIONS.min(head) - ring.capacity());
            let mut out = Vec::new();
            cursor.drain(&ring, &mut out, true);
            assert!(out.is_empty(), "{head}");
            assert_eq!(cursor.next, POSITIONS.min(head), "stops at the last stamp");
            assert_eq!(cursor.lost, ring.capacity());
            assert_eq!(
                ring.read_at(head),
                if head < POSITIONS {
                    Read::NotYet
                } else {
                    Read::Lost
                }
            );
        }
        let dropped = ring.dropped();
        assert!(!ring.push(&event(1)), "a position past the last stamp");
        assert_eq!(ring.dropped(), dropped + 1);
        assert_eq!(ring.read_at(u64::MAX), Read::Lost);
    }

    #[test]
    fn a_second_process_maps_the_same_ring() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Ring::new(open_or_create::<RingFile>(dir.path()).unwrap()).unwrap();
        writer.push(&event(5));
        let reader =
            Ring::new(crate::files::open_existing::<RingFile>(dir.path()).unwrap()).unwrap();
        assert!(matches!(reader.read_at(0), Read::Event(e) if e.t_ns == 5));
    }
}
