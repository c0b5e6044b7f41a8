//! The pool table from any bytes: every reader, and joining a pool named by
//! the input (unless a slot is being claimed: join waits a second there).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramshare_common::pool::{check_name, Pools, HEADER_LEN, MAGIC, SLOT_SIZE, VERSION};
use vramshare_fuzz::{file, Aligned};

const CLAIMING: u32 = 1;

fuzz_target!(|data: &[u8]| {
    let Some((_, bytes)) = file(data, MAGIC, VERSION, HEADER_LEN, SLOT_SIZE, |n| n) else {
        return;
    };
    let Ok(pools) = Pools::new(Aligned::new(&bytes)) else {
        return;
    };
    let count = pools.slots().len();
    for (index, slot) in pools.in_use() {
        assert!((index as usize) < count);
        let name = slot.name();
        let (found, same) = pools.find(&name).unwrap();
        assert!(found <= index && same.name() == name);
        for device in vramshare_common::size::Device::all() {
            let _ = (slot.budget(device), slot.device_bytes(device));
            if slot.try_reserve_as(device, 1 << 20, device.index() % 2 == 0, 4096) {
                slot.unreserve(device, 1 << 20);
            }
        }
    }
    assert!(pools.get(count as u32).is_none());
    let _ = pools.get(u32::MAX);
    let claiming = bytes[HEADER_LEN..]
        .chunks_exact(SLOT_SIZE)
        .any(|slot| u32::from_ne_bytes(slot[..4].try_into().unwrap()) == CLAIMING);
    // The name to join: the input's last bytes, up to 8.
    let tail = &data[data.len().saturating_sub(8)..];
    let name = String::from_utf8_lossy(tail).into_owned();
    if !claiming && check_name(&name).is_ok() {
        if let Ok((index, slot)) = pools.join(&name, || Some(())) {
            assert!((index as usize) < count && slot.in_use() && slot.name() == name);
        }
    }
});
