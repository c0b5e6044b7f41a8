//! The process registry from any bytes: every reader, with pools named by
//! the slots and u32::MAX. Flag bit 1 makes every slot claim this process's
//! pid and start time, so that slots read as live.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramshare_common::settings::Priority;
use vramshare_common::registry::{Registry, HEADER_LEN, MAGIC, SLOT_SIZE, VERSION};
use vramshare_common::size::MAX_DEVICES;
use vramshare_fuzz::{file, put_u32, put_u64, Aligned};

fuzz_target!(|data: &[u8]| {
    let Some((flags, mut bytes)) = file(data, MAGIC, VERSION, HEADER_LEN, SLOT_SIZE, |n| n) else {
        return;
    };
    let mut pools = vec![0, 1, u32::MAX];
    if bytes.len() >= HEADER_LEN {
        let me = std::process::id();
        let start = vramshare_common::process::start_time(me).unwrap();
        for slot in bytes[HEADER_LEN..].chunks_exact_mut(SLOT_SIZE) {
            if flags & 2 == 2 {
                put_u32(slot, 4, me);
                put_u64(slot, 8, start);
            }
            pools.push(u32::from_ne_bytes(slot[32..36].try_into().unwrap()).wrapping_sub(1));
        }
    }
    let Ok(registry) = Registry::new(Aligned::new(&bytes)) else {
        return;
    };
    for info in registry.live().iter().chain(&registry.gone()) {
        assert!(info
            .devices
            .iter()
            .all(|(d, _)| (*d as usize) < MAX_DEVICES));
    }
    let _ = registry.live_slot(std::process::id());
    for pool in pools {
        for priority in [Priority::Low, Priority::Normal, Priority::High] {
            let _ = registry.wanted_in_pool(pool, priority);
        }
        registry.reap_dead(pool, |slot| {
            let _ = slot.devices();
        });
    }
});
