//! Bytes laid out as a shared file is: 8-byte aligned (the readers view
//! them as atomics in place), or deliberately not.

use proptest::prelude::*;

/// A byte buffer on a `u64` allocation, seen from `offset` bytes in.
pub struct Buffer {
    words: Vec<u64>,
    offset: usize,
    len: usize,
}

impl Buffer {
    pub fn new(bytes: &[u8]) -> Buffer {
        Buffer::at(bytes, 0)
    }

    /// The bytes starting `offset` bytes past an 8-byte boundary.
    pub fn at(bytes: &[u8], offset: usize) -> Buffer {
        let mut buffer = Buffer {
            words: vec![0; (offset + bytes.len()).div_ceil(8)],
            offset,
            len: bytes.len(),
        };
        buffer.as_mut().copy_from_slice(bytes);
        buffer
    }
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `offset + len` bytes lie inside `words`.
        unsafe {
            std::slice::from_raw_parts(
                (self.words.as_ptr() as *const u8).add(self.offset),
                self.len,
            )
        }
    }
}

impl AsMut<[u8]> for Buffer {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, borrowed mutably.
        unsafe {
            std::slice::from_raw_parts_mut(
                (self.words.as_mut_ptr() as *mut u8).add(self.offset),
                self.len,
            )
        }
    }
}

/// A file header as `files` writes one.
pub fn header(magic: u64, version: u32, slot_size: usize, count: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    bytes[0..8].copy_from_slice(&magic.to_ne_bytes());
    bytes[8..12].copy_from_slice(&version.to_ne_bytes());
    bytes[12..16].copy_from_slice(&(slot_size as u32).to_ne_bytes());
    bytes[16..24].copy_from_slice(&count.to_ne_bytes());
    bytes
}

/// Arbitrary file contents given a valid header of this layout: cut to
/// whole slots, with `count` slots said (or, with none, the count that fits).
pub fn with_valid_header(
    bytes: &mut Vec<u8>,
    (magic, version, slot_size, header_len): (u64, u32, usize, usize),
    count: Option<u64>,
) {
    if bytes.len() < header_len {
        return;
    }
    let slots = (bytes.len() - header_len) / slot_size;
    bytes.truncate(header_len + slots * slot_size);
    let count = count.unwrap_or(slots as u64);
    bytes[..24].copy_from_slice(&header(magic, version, slot_size, count, 24));
}

pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
}

pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}

pub fn get_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

pub fn get_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(bytes[offset..offset + 8].try_into().unwrap())
}

/// Which of `count` slots of `slot_size` bytes after a header of
/// `header_len` a reference returned by a reader is; fails the property if
/// it is not one of them.
pub fn slot_index<T>(
    base: *const u8,
    header_len: usize,
    slot_size: usize,
    count: usize,
    slot: &T,
) -> Result<usize, TestCaseError> {
    let offset = (slot as *const T as usize).wrapping_sub(base as usize + header_len);
    prop_assert_eq!(offset % slot_size, 0, "not at a slot boundary");
    let index = offset / slot_size;
    prop_assert!(index < count, "slot {} of {}", index, count);
    Ok(index)
}

/// A 64-bit counter as corrupt files hold them: anything, but often at
/// the edges where arithmetic overflows.
pub fn counter() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..16u64,
        (0..16u64).prop_map(|d| u64::MAX - d),
        (0..16u64).prop_map(|d| (1u64 << 63) - d),
        (0..16u64).prop_map(|d| (1u64 << 63) + d),
    ]
}

/// A 32-bit field the same way.
pub fn small() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), 0..4u32, Just(u32::MAX)]
}
