//! A GPU's PCI address, as a process's registry slot keeps it for each of
//! its devices: the device numbers a process uses are its own (after
//! `CUDA_VISIBLE_DEVICES`), its PCI address says which card it is.

/// A PCI address (domain, bus, device) as the registry holds it.
pub fn code(domain: u32, bus: u32, device: u32) -> u64 {
    1 + (((domain as u64) << 16) | (((bus & 0xff) as u64) << 8) | (device & 0xff) as u64)
}

/// The bus id of a [`code`] as `nvidia-smi` writes it
/// (`00000000:18:00.0`); `None` for 0.
pub fn bus_id(code: u64) -> Option<String> {
    let code = code.checked_sub(1)?;
    Some(format!(
        "{:08X}:{:02X}:{:02X}.0",
        code >> 16,
        (code >> 8) & 0xff,
        code & 0xff
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_pci_address_reads_as_nvidia_smi_writes_its_bus_id() {
        assert_eq!(bus_id(0), None, "unknown");
        assert_eq!(
            bus_id(code(0, 0x18, 0)).as_deref(),
            Some("00000000:18:00.0")
        );
        assert_eq!(
            bus_id(code(1, 0xaf, 3)).as_deref(),
            Some("00000001:AF:03.0")
        );
        // A hostile slot's garbage still reads as some id, not a panic.
        assert!(bus_id(u64::MAX).is_some());
    }
}
