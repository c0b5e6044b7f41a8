//! What the fuzz targets of the shared files share: the input as bytes
//! laid out as a mapping is (8-byte aligned), with a valid header when the
//! input asks for one, so that the fuzzer spends its time on the slots.

/// Bytes on a `u64` allocation: the readers take them as atomics in place.
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    pub fn new(bytes: &[u8]) -> Aligned {
        let mut aligned = Aligned {
            words: vec![0; bytes.len().div_ceil(8)],
            len: bytes.len(),
        };
        aligned.as_mut().copy_from_slice(bytes);
        aligned
    }
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes lie inside `words`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
}

impl AsMut<[u8]> for Aligned {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// The file for an input: its first byte says whether to write a valid
/// header (bit 0) over the rest, with the slot count that fits (`count`
/// rounds the number of whole slots down, for the ring's power of two);
/// the other bits are left to the caller.
pub fn file(
    data: &[u8],
    magic: u64,
    version: u32,
    header_len: usize,
    slot_size: usize,
    count: impl Fn(usize) -> usize,
) -> Option<(u8, Vec<u8>)> {
    let (&flags, rest) = data.split_first()?;
    let mut bytes = rest.to_vec();
    if flags & 1 == 1 && bytes.len() >= header_len {
        let slots = count((bytes.len() - header_len) / slot_size);
        bytes.truncate(header_len + slots * slot_size);
        bytes[0..8].copy_from_slice(&magic.to_ne_bytes());
        bytes[8..12].copy_from_slice(&version.to_ne_bytes());
        bytes[12..16].copy_from_slice(&(slot_size as u32).to_ne_bytes());
        bytes[16..24].copy_from_slice(&(slots as u64).to_ne_bytes());
    }
    Some((flags, bytes))
}

pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
}

pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}
