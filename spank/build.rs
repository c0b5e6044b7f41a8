//! The Slurm version the plugin is built for: Slurm loads a plugin only if
//! it says the version of the Slurm loading it. Read from Slurm's own
//! header (`SLURM_INCLUDE_DIR`, else /usr/include/slurm; Debian's
//! libslurm-dev); without one the plugin says version 0, and Slurm refuses
//! it with a message naming the versions.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let dir = std::env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include/slurm"));
    let header = dir.join("slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let number = std::fs::read_to_string(&header).ok().and_then(|text| {
        text.lines().find_map(|line| {
            let rest = line.trim().strip_prefix("#define SLURM_VERSION_NUMBER")?;
            let hex = rest.trim().strip_prefix("0x")?;
            u32::from_str_radix(hex.trim(), 16).ok()
        })
    });
    if number.is_none() {
        // Run again at every build until a header is found: a package
        // installs the header with the time it was packaged, older than
        // this run, so watching it alone would keep a plugin built before
        // libslurm-dev was installed, saying version 0. A path never made
        // is always out of date to Cargo.
        let out = std::env::var("OUT_DIR").unwrap_or_default();
        println!("cargo:rerun-if-changed={out}/no-slurm-header");
        println!(
            "cargo:warning=no Slurm header at {} (install libslurm-dev, or set SLURM_INCLUDE_DIR): the SPANK plugin is built for no Slurm version and Slurm will refuse it",
            header.display()
        );
    }
    println!(
        "cargo:rustc-env=SLURM_VERSION_NUMBER={}",
        number.unwrap_or(0)
    );
}
