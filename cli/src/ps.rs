//! `vramshare ps` and `top`: the live processes from the shared registry.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use vramshare_common::files::open_existing;
use vramshare_common::registry::{DeviceInfo, ProcessInfo, Registry, RegistryFile};
use vramshare_common::size::human_bytes;

/// The shared registry in `dir`, checked.
pub fn registry(dir: &Path) -> Result<Registry<memmap2::Mmap>, String> {
    let map = open_existing::<RegistryFile>(dir).map_err(|e| e.to_string())?;
    Registry::new(map).map_err(|why| format!("{}: {why}", dir.join("registry").display()))
}

pub fn live_processes(dir: &Path) -> Result<Vec<ProcessInfo>, String> {
    Ok(registry(dir)?.live())
}

#[derive(Serialize)]
struct ProcessRow {
    pid: u32,
    cmdline: String,
    spill: &'static str,
    devices: std::collections::BTreeMap<String, DeviceInfo>,
}

fn json_rows(processes: &[ProcessInfo]) -> Vec<ProcessRow> {
    processes
        .iter()
        .map(|p| ProcessRow {
            pid: p.pid,
            cmdline: p.cmdline.clone(),
            spill: if p.spill_off { "off" } else { "host" },
            devices: p
                .devices
                .iter()
                .map(|(d, i)| (d.to_string(), i.clone()))
                .collect(),
        })
        .collect()
}

/// The table, one row per process and device it has used.
pub fn table(processes: &[ProcessInfo], width: usize) -> String {
    let mut out = format!(
        "{:>8} {:>3} {:>10} {:>10} {:>10} {:>10} {:>7} {:>6}  {}\n",
        "PID", "GPU", "QUOTA", "DEVICE", "SPILLED", "PEAK", "ALLOCS", "SPILLS", "COMMAND"
    );
    for process in processes {
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
            let line = format!(
                "{:>8} {:>3} {:>10} {:>10} {:>10} {:>10} {:>7} {:>6}  {}",
                process.pid,
                gpu,
                quota,
                device_bytes,
                spilled,
                peak,
                allocs,
                spills,
                process.cmdline
            );
            out.push_str(&line.chars().take(width.max(80)).collect::<String>());
            out.push('\n');
        }
    }
    out
}

pub fn ps(dir: &Path, json: bool) -> Result<ExitCode, String> {
    let processes = live_processes(dir)?;
    if json {
        let text =
            serde_json::to_string_pretty(&json_rows(&processes)).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", table(&processes, usize::MAX));
    }
    Ok(ExitCode::SUCCESS)
}

fn totals(processes: &[ProcessInfo]) -> String {
    let device: u64 = processes
        .iter()
        .flat_map(|p| &p.devices)
        .map(|(_, i)| i.device_bytes)
        .sum();
    let spilled: u64 = processes
        .iter()
        .flat_map(|p| &p.devices)
        .map(|(_, i)| i.spilled_bytes)
        .sum();
    format!(
        "{} processes under vramshare: {} on GPUs, {} spilled to host memory",
        processes.len(),
        human_bytes(device),
        human_bytes(spilled)
    )
}

pub fn top(dir: &Path, interval_ms: u64, iterations: Option<u64>) -> Result<ExitCode, String> {
    use crossterm::event::{self, Event, KeyCode, KeyModifiers};
    use crossterm::{cursor, execute, terminal};

    let interval = Duration::from_millis(interval_ms.max(50));
    if let Some(count) = iterations {
        // Plain output for scripts: no terminal control.
        for i in 0..count {
            let processes = live_processes(dir)?;
            println!("{}\n{}", totals(&processes), table(&processes, usize::MAX));
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
    let result = (|| -> Result<(), String> {
        loop {
            let processes = live_processes(dir)?;
            let (width, _) = terminal::size().unwrap_or((120, 40));
            let screen = format!(
                "vramshare top: {} (q to quit)\n\n{}",
                totals(&processes),
                table(&processes, width as usize)
            );
            let _ = execute!(
                stdout,
                cursor::MoveTo(0, 0),
                terminal::Clear(terminal::ClearType::All)
            );
            // Raw mode: lines need a carriage return.
            let _ = write!(stdout, "{}", screen.replace('\n', "\r\n"));
            let _ = stdout.flush();
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
