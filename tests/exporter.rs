//! `vramshare exporter` against live processes under the shim: its text
//! read directly, and scraped by a real Prometheus server (Debian's
//! `prometheus`) whose query API then answers with a client's bytes.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A child process killed (by its pid) and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The exporter on a port of its choosing, and that port (from the line it
/// prints once it listens).
fn exporter(dir: &Path) -> (Killed, u16) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(["exporter", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .rsplit_once("127.0.0.1:")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (Killed(child), port)
}

/// The body of a GET of `url`, retried for up to `patience`.
fn get(url: &str, patience: Duration) -> String {
    let began = Instant::now();
    loop {
        match ureq::get(url).call() {
            Ok(mut response) => return response.body_mut().read_to_string().unwrap(),
            Err(why) if began.elapsed() > patience => panic!("GET {url}: {why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A client under a 32 MiB quota, in pool `train` (budget 48 MiB), that
/// allocated 8 and 64 MiB (the second spilling in part) and sleeps, with
/// Slurm's job id in its environment; its pid and its device 0 as
/// `vramshare ps --json` shows it.
fn holding_client(shm: &Path) -> (Killed, u32, serde_json::Value) {
    let steps = ["malloc:a:8M", "malloc:b:64M", "sleep:60000"];
    let env = [
        ("VRAMSHARE_QUOTA", "32MiB"),
        ("VRAMSHARE_POOL", "train"),
        ("VRAMSHARE_POOL_QUOTA", "48MiB"),
        ("SLURM_JOB_ID", "4242"),
    ];
    let child = Killed(client_command(shm, &env, &steps).spawn().unwrap());
    let pid = child.0.id();
    let began = Instant::now();
    loop {
        let ps = vramshare(&["ps", "--json", "--dir", shm.to_str().unwrap()]);
        let rows: serde_json::Value = serde_json::from_str(&ps).unwrap_or_default();
        let device = &rows[0]["devices"]["0"];
        if device["spills"] == 1 {
            return (child, pid, device.clone());
        }
        if began.elapsed() > Duration::from_secs(10) {
            panic!("the client never spilled: {ps}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn vramshare(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of `text` for `metric` whose labels include each of `labels`.
fn sample<'a>(text: &'a str, metric: &str, labels: &[&str]) -> Option<&'a str> {
    text.lines().find(|line| {
        line.starts_with(&format!("{metric}{{")) && labels.iter().all(|l| line.contains(l))
    })
}

#[test]
fn the_metrics_name_each_process_by_pid_gpu_pool_and_job_with_its_bytes_and_counts() {
    let shm = tempfile::tempdir().unwrap();
    let (_client, pid, ps) = holding_client(shm.path());
    let (_exporter, port) = exporter(shm.path());
    let text = get(
        &format!("http://127.0.0.1:{port}/metrics"),
        Duration::from_secs(10),
    );
    let who = [
        format!("pid=\"{pid}\""),
        "gpu=\"0\"".to_string(),
        // The fake driver's device 0 is on bus 0x18.
        "bus_id=\"00000000:18:00.0\"".to_string(),
        "slurm_job_id=\"4242\"".to_string(),
        "priority=\"normal\"".to_string(),
        "pool=\"train\"".to_string(),
    ];
    let who: Vec<&str> = who.iter().map(String::as_str).collect();
    // The numbers `ps` shows (72 MiB in all, 32 of them on the device).
    let total = ps["device_bytes"].as_u64().unwrap() + ps["spilled_bytes"].as_u64().unwrap();
    assert_eq!(total, 72 << 20, "{ps}");
    for (metric, field) in [
        ("vramshare_device_bytes", "device_bytes"),
        ("vramshare_spilled_bytes", "spilled_bytes"),
        ("vramshare_quota_bytes", "quota"),
        ("vramshare_peak_device_bytes", "peak_device"),
        ("vramshare_allocations_total", "allocations"),
        ("vramshare_spills_total", "spills"),
        ("vramshare_rejections_total", "rejections"),
        ("vramshare_moved_bytes_total", "moved_bytes"),
    ] {
        let value = ps[field].as_u64().unwrap();
        let line = sample(&text, metric, &who).unwrap_or_else(|| panic!("{metric}:\n{text}"));
        assert!(line.ends_with(&format!("}} {value}")), "{line}");
    }
    assert!(text.contains("# TYPE vramshare_spills counter"), "{text}");
    let budget = sample(
        &text,
        "vramshare_pool_budget_bytes",
        &["pool=\"train\"", "gpu=\"0\""],
    );
    assert!(
        budget.is_some_and(|l| l.ends_with(&format!(" {}", 48 << 20))),
        "{text}"
    );
    let held = sample(&text, "vramshare_pool_device_bytes", &["pool=\"train\""]);
    let device = ps["device_bytes"].as_u64().unwrap();
    assert!(
        held.is_some_and(|l| l.ends_with(&format!(" {device}"))),
        "{text}"
    );
    assert!(text.lines().any(|l| l == "vramshare_up 1"), "{text}");
    assert!(text.contains("vramshare_build_info{version=\""), "{text}");
    assert!(text.contains("vramshare_ring_events_lost_total "), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    // The shipped Grafana dashboard asks only for metrics the exporter has.
    for expr in dashboard_queries() {
        let names = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("vramshare_"));
        for name in names {
            let family = name.trim_end_matches("_total");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "the dashboard's {name} is not exported"
            );
        }
    }
}

/// The PromQL of every panel of `dashboards/vramshare.json`.
fn dashboard_queries() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/vramshare.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap().clone())
        .map(|target| target["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(queries.len() >= 6, "{queries:?}");
    queries
}

#[test]
fn a_corrupt_registry_sets_up_to_zero_and_the_exporter_keeps_serving() {
    let shm = tempfile::tempdir().unwrap();
    std::fs::write(shm.path().join("registry"), vec![0x5au8; 4096]).unwrap();
    let (_exporter, port) = exporter(shm.path());
    let url = format!("http://127.0.0.1:{port}/metrics");
    for _ in 0..2 {
        let text = get(&url, Duration::from_secs(10));
        assert!(text.lines().any(|l| l == "vramshare_up 0"), "{text}");
    }
    match ureq::get(&format!("http://127.0.0.1:{port}/elsewhere")).call() {
        Err(ureq::Error::StatusCode(404)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_real_prometheus_scrapes_the_exporter_and_answers_queries_on_a_clients_bytes() {
    let Some(prometheus) = installed(
        &["prometheus"],
        "prometheus",
        "VRAMSHARE_REQUIRE_PROMETHEUS",
    ) else {
        return;
    };
    let shm = tempfile::tempdir().unwrap();
    let (_client, pid, ps) = holding_client(shm.path());
    let (_exporter, port) = exporter(shm.path());
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: vramshare\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let web = free_port();
    let log = std::fs::File::create(work.path().join("prometheus.log")).unwrap();
    let _server = Killed(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let query = |promql: &str| -> Option<String> {
        let url = format!("http://127.0.0.1:{web}/api/v1/query");
        let body = ureq::get(&url)
            .query("query", promql)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_string)
    };
    let began = Instant::now();
    let wanted = [
        (
            format!("vramshare_device_bytes{{pid=\"{pid}\",slurm_job_id=\"4242\"}}"),
            ps["device_bytes"].to_string(),
        ),
        (
            format!("vramshare_spills_total{{pid=\"{pid}\"}}"),
            "1".to_string(),
        ),
        ("vramshare_up".to_string(), "1".to_string()),
    ];
    for (promql, value) in wanted {
        loop {
            if query(&promql).as_deref() == Some(value.as_str()) {
                break;
            }
            if began.elapsed() > Duration::from_secs(60) {
                let log = std::fs::read_to_string(work.path().join("prometheus.log")).unwrap();
                panic!(
                    "Prometheus never answered {promql} = {value}: {:?}\n{log}",
                    query(&promql)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Every query of the shipped dashboard is one Prometheus accepts, with
    // Grafana's variables as Grafana would fill them.
    for expr in dashboard_queries() {
        let promql = expr.replace("$__rate_interval", "1m").replace("$gpu", ".*");
        let url = format!("http://127.0.0.1:{web}/api/v1/query");
        let body = ureq::get(&url)
            .query("query", &promql)
            .call()
            .unwrap_or_else(|why| panic!("{promql}: {why}"))
            .body_mut()
            .read_to_string()
            .unwrap();
        assert!(body.contains("\"status\":\"success\""), "{promql}: {body}");
    }
}
