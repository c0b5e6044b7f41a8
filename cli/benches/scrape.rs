//! How long one scrape of `vramshare exporter` takes with 100 live
//! processes in the registry: 100 sleeping processes, each given a slot
//! with counters on two devices (as the shim would), then 200 GETs of
//! `/metrics` over loopback, timed from the request to the last byte.
//!   cargo bench -p vramshare-cli --bench scrape

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vramshare_common::files::open_or_create;
use vramshare_common::registry::{Registry, RegistryFile};
use vramshare_common::settings::Spill;

const PROCESSES: usize = 100;
const SCRAPES: usize = 200;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(open_or_create::<RegistryFile>(dir.path()).unwrap()).unwrap();
    let mut sleepers: Vec<Child> = (0..PROCESSES)
        .map(|i| {
            Command::new("sleep")
                .arg("600")
                .env("SLURM_JOB_ID", (1000 + i).to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    // The processes' start times are readable once they have exec'd.
    std::thread::sleep(Duration::from_millis(200));
    for (i, sleeper) in sleepers.iter().enumerate() {
        let pid = sleeper.id();
        let start = vramshare_common::process::start_time(pid).unwrap();
        let slot = registry
            .claim(
                pid,
                start,
                &format!("python train.py --rank {i}"),
                Spill::Host,
            )
            .unwrap();
        for device in &slot.devices()[..2] {
            device
                .quota
                .store(8 << 30, std::sync::atomic::Ordering::Relaxed);
            device
                .device_bytes
                .store((i as u64 + 1) << 26, std::sync::atomic::Ordering::Relaxed);
            device
                .spilled_bytes
                .store((i as u64) << 24, std::sync::atomic::Ordering::Relaxed);
            device
                .allocations
                .store(1000 + i as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut exporter = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args([
            "exporter",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--dir",
        ])
        .arg(dir.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let fetch = || {
        ureq::get(&url)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
    };
    let began = Instant::now();
    let first = loop {
        if let Some(text) = fetch() {
            break text;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the exporter never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let series = first
        .lines()
        .filter(|l| l.starts_with("vramshare_device_bytes{"))
        .count();
    assert_eq!(series, 2 * PROCESSES, "{first}");
    let mut times: Vec<f64> = (0..SCRAPES)
        .map(|_| {
            let began = Instant::now();
            let text = fetch().expect("a scrape");
            assert!(text.ends_with("# EOF\n"));
            began.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!(
        "scrape of {PROCESSES} processes ({series} device series, {} bytes): median {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {SCRAPES}",
        first.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    let _ = exporter.kill();
    let _ = exporter.wait();
    for sleeper in &mut sleepers {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
}
