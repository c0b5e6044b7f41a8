//! `vramshare quota get|set`: read and change a running process's quota.
//! A new quota is written into the process's registry slot; the shim in
//! that process reads it at its next allocation, and its watcher thread
//! (every 50 ms) promotes spilled blocks when it is raised and demotes
//! managed blocks to the host when it is cut.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use vramshare_common::files::open_existing_mut;
use vramshare_common::registry::{Registry, RegistryFile, NO_QUOTA};
use vramshare_common::size::{human_bytes, parse_limit, Device, Limit, MAX_DEVICES};

use crate::out::{print, Failure};

/// The forms `quota set` accepts.
pub const SET_FORMS: &str =
    "a size such as 8GiB, 512MiB or 1048576 (bytes), or \"none\" for no limit";

/// A new quota: bytes, or no limit.
#[derive(Clone, Copy, Debug)]
pub struct NewQuota(pub Option<u64>);

/// Parses SIZE for `quota set`: bytes, or `none`.
pub fn parse_set_size(text: &str) -> Result<NewQuota, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(NewQuota(None));
    }
    match parse_limit(text) {
        // The registry and the pool table store "no limit" as this very
        // number: taken as a size, it would silently become "none".
        Ok(Limit::Bytes(NO_QUOTA)) => Err(format!(
            "{text:?} is 2^64 - 1 bytes, the number that stands for no limit (say \"none\" for that); the largest size accepted is {} bytes; accepted forms: {SET_FORMS}",
            NO_QUOTA - 1
        )),
        Ok(Limit::Bytes(bytes)) => Ok(NewQuota(Some(bytes))),
        Ok(Limit::Percent(_)) => Err(format!(
            "{text:?}: a percentage needs the device's size, which only the process knows; accepted forms: {SET_FORMS}"
        )),
        Err(why) => Err(format!("{why}; accepted forms: {SET_FORMS}")),
    }
}

pub fn get(dir: &Path, pid: Option<u32>, json: bool) -> Result<ExitCode, Failure> {
    let pools = crate::ps::pools(dir)?;
    let mut processes = crate::ps::live_processes(dir)?;
    if let Some(pid) = pid {
        processes.retain(|p| p.pid == pid);
        if processes.is_empty() {
            return Err(format!("no live vramshare process {pid} in {}", dir.display()).into());
        }
    }
    let rows: Vec<(u32, u32, Option<u64>, u64)> = processes
        .iter()
        .flat_map(|p| {
            p.devices
                .iter()
                .map(move |(d, info)| (p.pid, *d, info.quota, info.device_bytes))
        })
        .collect();
    if json {
        let processes: Vec<serde_json::Value> = rows
            .iter()
            .map(|(pid, device, quota, used)| {
                serde_json::json!({"pid": pid, "device": device, "quota": quota, "device_bytes": used})
            })
            .collect();
        let pools: Vec<serde_json::Value> = pools
            .iter()
            .flat_map(|p| {
                p.devices.iter().map(move |(device, budget, used)| {
                    serde_json::json!({"pool": p.name, "device": device, "budget": budget, "device_bytes": used})
                })
            })
            .collect();
        let value = serde_json::json!({"processes": processes, "pools": pools});
        let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?;
        print(&(text + "\n"))?;
    } else {
        let mut text = format!(
            "{:>8} {:>3} {:>10} {:>10}\n",
            "PID", "GPU", "QUOTA", "DEVICE"
        );
        for (pid, device, quota, used) in rows {
            let quota = show(quota);
            text += &format!(
                "{pid:>8} {device:>3} {quota:>10} {:>10}\n",
                human_bytes(used)
            );
        }
        if pid.is_none() {
            text += &crate::ps::pool_table(&processes, &pools);
        }
        print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn check_device(device: u32) -> Result<Device, String> {
    Device::new(device).ok_or_else(|| {
        format!(
            "--device {device}: devices are numbered 0 to {}",
            MAX_DEVICES - 1
        )
    })
}

fn show(limit: Option<u64>) -> String {
    limit.map_or_else(|| "none".to_string(), human_bytes)
}

/// `quota set --pool NAME`: changes a pool's budget; its members notice
/// within 100 ms.
pub fn set_pool(
    dir: &Path,
    name: &str,
    device: u32,
    NewQuota(size): NewQuota,
) -> Result<ExitCode, Failure> {
    use vramshare_common::pool::{PoolFile, Pools};
    let device = check_device(device)?;
    let map = open_existing_mut::<PoolFile>(dir).map_err(|e| e.to_string())?;
    let pools = Pools::new(map).map_err(|why| format!("{}: {why}", dir.join("pools").display()))?;
    let (_, pool) = pools
        .find(name)
        .ok_or_else(|| format!("no pool {name:?} in {}", dir.display()))?;
    let before = pool.set_budget(device, size);
    print(&format!(
        "pool {name} device {device}: budget {} -> {}\n",
        show(before),
        show(size)
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `quota set --pid PID`: changes a running process's quota; it notices
/// within 100 ms.
pub fn set(
    dir: &Path,
    pid: u32,
    device: u32,
    NewQuota(size): NewQuota,
) -> Result<ExitCode, Failure> {
    let device = check_device(device)?;
    let map = open_existing_mut::<RegistryFile>(dir).map_err(|e| e.to_string())?;
    let registry =
        Registry::new(map).map_err(|why| format!("{}: {why}", dir.join("registry").display()))?;
    let slot = registry
        .live_slot(pid)
        .ok_or_else(|| format!("no live vramshare process {pid} in {}", dir.display()))?;
    let seen = slot.device_count();
    if seen > 0 && device.number() >= seen {
        return Err(format!(
            "process {pid} sees {seen} device{} (numbered from 0, after its CUDA_VISIBLE_DEVICES): it has no device {device}",
            if seen == 1 { "" } else { "s" }
        )
        .into());
    }
    let before = slot.devices()[device.index()]
        .quota
        .swap(size.unwrap_or(NO_QUOTA), Ordering::AcqRel);
    print(&format!(
        "pid {pid} device {device}: quota {} -> {}\n",
        show((before != NO_QUOTA).then_some(before)),
        show(size)
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_that_means_no_limit_is_not_a_size() {
        let largest = NO_QUOTA - 1;
        for text in ["18446744073709551615", "18446744073709551615B"] {
            let why = parse_set_size(text).unwrap_err();
            assert!(
                why.contains(&format!("the largest size accepted is {largest} bytes"))
                    && why.ends_with(SET_FORMS),
                "{why}"
            );
        }
        let size = |text: &str| parse_set_size(text).map(|NewQuota(size)| size);
        assert_eq!(size(&largest.to_string()), Ok(Some(largest)));
        assert_eq!(size("8GiB"), Ok(Some(8 << 30)));
        assert_eq!(size("none"), Ok(None));
    }
}
