//! `vramshare ps` and `top`: the live processes from the shared registry.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use vramshare_common::files::open_existing;
use vramshare_common::process::JobIds;
use vramshare_common::registry::{DeviceInfo, ProcessInfo, Registry, RegistryFile};
use vramshare_common::size::human_bytes;

use crate::out::{print, Failure};
use crate::show::{escaped, total};

/// The shared registry in `dir`, checked.
pub fn registry(
    dir: &Path,
) -> Result<Registry<vramshare_common::files::Mapped<memmap2::Mmap>>, String> {
    let map = open_existing::<RegistryFile>(dir).map_err(|e| e.to_string())?;
    Registry::new(map).map_err(|why| format!("{}: {why}", dir.join("registry").display()))
}

pub fn live_processes(dir: &Path) -> Result<Vec<ProcessInfo>, String> {
    Ok(ranks_together(registry(dir)?.live()))
}

/// The ranks of each distributed job together, in rank order, where its
/// first rank came; other processes where they were.
fn ranks_together(processes: Vec<ProcessInfo>) -> Vec<ProcessInfo> {
    let ranks: Vec<Option<(String, u64)>> = processes
        .iter()
        .map(|p| {
            let ids = JobIds::of(p.pid);
            ids.rank_in_run().map(|(run, rank)| (run.to_string(), rank))
        })
        .collect();
    let mut order: Vec<(usize, u64, usize)> = ranks
        .iter()
        .enumerate()
        .map(|(index, rank)| match rank {
            Some((run, rank)) => {
                let first = ranks
                    .iter()
                    .position(|r| r.as_ref().is_some_and(|(other, _)| other == run))
                    .unwrap_or(index);
                (first, *rank, index)
            }
            None => (index, 0, index),
        })
        .collect();
    order.sort_unstable();
    let mut slots: Vec<Option<ProcessInfo>> = processes.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, _, index)| slots[index].take())
        .collect()
}

/// A pool in use: its name, and per device its budget and the bytes its
/// members hold.
pub struct PoolInfo {
    pub index: u32,
    pub name: String,
    pub devices: Vec<(u32, Option<u64>, u64)>,
}

/// The pools in use (none if no process has made the pool table).
pub fn pools(dir: &Path) -> Result<Vec<PoolInfo>, String> {
    use vramshare_common::files::FileError;
    use vramshare_common::pool::{PoolFile, Pools};
    let map = match open_existing::<PoolFile>(dir) {
        Ok(map) => map,
        Err(FileError::Missing(_)) => return Ok(Vec::new()),
        Err(error) => return Err(error.to_string()),
    };
    let table = Pools::new(map).map_err(|why| format!("{}: {why}", dir.join("pools").display()))?;
    Ok(table
        .in_use()
        .into_iter()
        .map(|(index, pool)| PoolInfo {
            index,
            name: pool.name(),
            devices: vramshare_common::size::Device::all()
                .filter(|d| pool.budget(*d).is_some() || pool.device_bytes(*d) > 0)
                .map(|d| (d.number(), pool.budget(d), pool.device_bytes(d)))
                .collect(),
        })
        .collect())
}

#[derive(Serialize)]
struct ProcessRow {
    pid: u32,
    cmdline: String,
    spill: &'static str,
    pool: Option<String>,
    priority: &'static str,
    /// The scheduler's job, where the process's environment names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm_job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm_step_id: Option<String>,
    /// A distributed job's rank and size, where its environment says.
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    world_size: Option<String>,
    /// Kernel launches the shim has seen, and their rate since the process
    /// registered.
    launches: u64,
    launches_per_second: f64,
    /// Uses of blocks (by launches, copies and library calls), and the
    /// share of them that found their block on the device (none: no use).
    uses: u64,
    uses_on_device: Option<f64>,
    /// Bytes the spill tier moved between its devices and host memory, a
    /// second since the process registered (each device's total is its
    /// `moved_bytes`).
    moved_bytes_per_second: f64,
    devices: std::collections::BTreeMap<String, DeviceInfo>,
}

/// `count` per second since the process registered.
fn rate(process: &ProcessInfo, count: u64, now_ns: u64) -> f64 {
    let seconds = now_ns.saturating_sub(process.registered_ns) as f64 / 1e9;
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Launches per second since the process registered.
fn launch_rate(process: &ProcessInfo, now_ns: u64) -> f64 {
    rate(process, process.launches, now_ns)
}

/// Bytes moved per second since the process registered, all devices.
fn moved_rate(process: &ProcessInfo, now_ns: u64) -> f64 {
    let moved = process.devices.iter().map(|(_, d)| d.moved_bytes).sum();
    rate(process, moved, now_ns)
}

/// The share of uses that found their block on the device.
fn on_device_share(process: &ProcessInfo) -> Option<f64> {
    let in_host = process.uses_in_host.min(process.uses);
    (process.uses > 0).then(|| 1.0 - in_host as f64 / process.uses as f64)
}

fn json_rows(processes: &[ProcessInfo], pools: &[PoolInfo]) -> Vec<ProcessRow> {
    let now = vramshare_common::process::monotonic_ns();
    processes
        .iter()
        .map(|p| {
            let job = JobIds::of(p.pid);
            let some = |id: String| (!id.is_empty()).then_some(id);
            let ids = [
                job.slurm_job_id,
                job.slurm_step_id,
                job.rank,
                job.world_size,
            ]
            .map(some);
            (p, ids)
        })
        .map(
            |(p, [slurm_job_id, slurm_step_id, rank, world_size])| ProcessRow {
                slurm_job_id,
                slurm_step_id,
                rank,
                world_size,
                launches: p.launches,
                launches_per_second: launch_rate(p, now),
                uses: p.uses,
                uses_on_device: on_device_share(p),
                moved_bytes_per_second: moved_rate(p, now),
                pid: p.pid,
                cmdline: p.cmdline.clone(),
                spill: p.spill.name(),
                pool: pool_name(pools, p.pool),
                priority: p.priority.name(),
                devices: p
                    .devices
                    .iter()
                    .map(|(d, i)| (d.to_string(), i.clone()))
                    .collect(),
            },
        )
        .collect()
}

/// A rate, short: `950`, `12.3k`, `4.1M`.
fn short_rate(rate: f64) -> String {
    match rate {
        r if r >= 1e6 => format!("{:.1}M", r / 1e6),
        r if r >= 1e4 => format!("{:.0}k", r / 1e3),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// The table, one row per process and device it has used; the launch rate
/// and the bytes moved a second (since the process started) and the share
/// of uses that found their block on the device, on its first row.
pub fn table(processes: &[ProcessInfo], width: usize) -> String {
    let now = vramshare_common::process::monotonic_ns();
    let mut out = format!(
        "{:>8} {:>3} {:>10} {:>10} {:>10} {:>10} {:>7} {:>6} {:>8} {:>9} {:>6}  {}\n",
        "PID",
        "GPU",
        "QUOTA",
        "DEVICE",
        "SPILLED",
        "PEAK",
        "ALLOCS",
        "SPILLS",
        "LAUNCH/S",
        "MOVED/S",
        "ON-GPU",
        "COMMAND"
    );
    for process in processes {
        let moved = moved_rate(process, now);
        let share =
            on_device_share(process).map_or("-".to_string(), |s| format!("{:.0}%", 100.0 * s));
        let mut rate = Some((
            short_rate(launch_rate(process, now)),
            if moved > 0.0 {
                human_bytes(moved as u64)
            } else {
                "-".to_string()
            },
            share,
        ));
        // The scheduler's name for the job, before what it runs.
        let command = match JobIds::of(process.pid).describe() {
            Some(job) => format!("[{}] {}", escaped(&job), escaped(&process.cmdline)),
            None => escaped(&process.cmdline).into_owned(),
        };
        let devices = if process.devices.is_empty() {
            vec![None]
        } else {
            process.devices.iter().map(Some).collect()
        };
        for device in devices {
            let (gpu, quota, device_bytes, spilled, peak, allocs, spills) = match device {
                Some((d, i)) => (
                    d.to_string(),
                    i.quota.map_or("-".to_string(), human_bytes),
                    human_bytes(i.device_bytes),
                    human_bytes(i.spilled_bytes),
                    human_bytes(i.peak_device),
                    i.allocations.to_string(),
                    i.spills.to_string(),
                ),
                None => (
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "0".into(),
                    "0".into(),
                ),
            };
            let (launches, moved, share) = rate.take().unwrap_or_default();
            let line = format!(
                "{:>8} {:>3} {:>10} {:>10} {:>10} {:>10} {:>7} {:>6} {:>8} {:>9} {:>6}  {}",
                process.pid,
                gpu,
                quota,
                device_bytes,
                spilled,
                peak,
                allocs,
                spills,
                launches,
                moved,
                share,
                command
            );
            out.push_str(&line.chars().take(width.max(80)).collect::<String>());
            out.push('\n');
        }
    }
    out
}

fn pool_name(pools: &[PoolInfo], index: Option<u32>) -> Option<String> {
    let index = index?;
    Some(
        pools
            .iter()
            .find(|p| p.index == index)
            .map_or_else(|| format!("#{index}"), |p| p.name.clone()),
    )
}

/// The pools' table: budget and use per device, and the members.
pub fn pool_table(processes: &[ProcessInfo], pools: &[PoolInfo]) -> String {
    if pools.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n{:<16} {:>3} {:>10} {:>10}  {}\n",
        "POOL", "GPU", "BUDGET", "DEVICE", "MEMBERS (priority)"
    );
    for pool in pools {
        let members: Vec<String> = processes
            .iter()
            .filter(|p| p.pool == Some(pool.index))
            .map(|p| format!("{} ({})", p.pid, p.priority.name()))
            .collect();
        let devices = if pool.devices.is_empty() {
            vec![(0, None, 0)]
        } else {
            pool.devices.clone()
        };
        for (device, budget, used) in devices {
            out.push_str(&format!(
                "{:<16} {:>3} {:>10} {:>10}  {}\n",
                escaped(&pool.name),
                device,
                budget.map_or("none".to_string(), human_bytes),
                human_bytes(used),
                members.join(", ")
            ));
        }
    }
    out
}

pub fn ps(dir: &Path, json: bool) -> Result<ExitCode, Failure> {
    let processes = live_processes(dir)?;
    let pools = pools(dir)?;
    if json {
        let text = serde_json::to_string_pretty(&json_rows(&processes, &pools))
            .map_err(|e| e.to_string())?;
        print(&(text + "\n"))?;
    } else {
        print(&(table(&processes, usize::MAX) + &pool_table(&processes, &pools)))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn totals(processes: &[ProcessInfo]) -> String {
    let devices = || processes.iter().flat_map(|p| &p.devices);
    let device = total(devices().map(|(_, i)| i.device_bytes));
    let spilled = total(devices().map(|(_, i)| i.spilled_bytes));
    format!(
        "{} processes under vramshare: {} on GPUs, {} spilled to host memory",
        processes.len(),
        human_bytes(device),
        human_bytes(spilled)
    )
}

pub fn top(dir: &Path, interval_ms: u64, iterations: Option<u64>) -> Result<ExitCode, Failure> {
    use crossterm::event::{self, Event, KeyCode, KeyModifiers};
    use crossterm::{cursor, execute, terminal};

    let interval = Duration::from_millis(interval_ms.max(50));
    if let Some(count) = iterations {
        // Plain output for scripts: no terminal control.
        for i in 0..count {
            let processes = live_processes(dir)?;
            let pools = pools(dir)?;
            print(&format!(
                "{}\n{}{}\n",
                totals(&processes),
                table(&processes, usize::MAX),
                pool_table(&processes, &pools)
            ))?;
            if i + 1 < count {
                std::thread::sleep(interval);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    live_processes(dir)?; // refuse a bad folder before taking the screen
    let mut stdout = std::io::stdout();
    terminal::enable_raw_mode()
        .map_err(|e| format!("top needs a terminal ({e}); use --iterations N to print plainly"))?;
    let _ = execute!(stdout, terminal::EnterAlternateScreen, cursor::Hide);
    let result = (|| -> Result<(), Failure> {
        loop {
            let processes = live_processes(dir)?;
            let pools = pools(dir)?;
            let (width, _) = terminal::size().unwrap_or((120, 40));
            let screen = format!(
                "vramshare top: {} (q to quit)\n\n{}{}",
                totals(&processes),
                table(&processes, width as usize),
                pool_table(&processes, &pools)
            );
            let _ = execute!(
                stdout,
                cursor::MoveTo(0, 0),
                terminal::Clear(terminal::ClearType::All)
            );
            // Raw mode: lines need a carriage return. A terminal that cannot
            // be written any more ends the loop, like a closed pipe.
            write!(stdout, "{}", screen.replace('\n', "\r\n"))
                .and_then(|()| stdout.flush())
                .map_err(Failure::Output)?;
            if event::poll(interval).map_err(|e| e.to_string())? {
                if let Event::Key(key) = event::read().map_err(|e| e.to_string())? {
                    let ctrl_c = key.code == KeyCode::Char('c')
                        && key.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(());
                    }
                }
            }
        }
    })();
    let _ = execute!(stdout, cursor::Show, terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
    result.map(|()| ExitCode::SUCCESS)
}
