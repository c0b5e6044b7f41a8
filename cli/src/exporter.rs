//! `vramshare exporter`: the shared files as Prometheus metrics. Each scrape
//! of `/metrics` reads the registry, the pool table and the trace ring
//! afresh and writes what they say in the OpenMetrics text format: what
//! Prometheus sees is what `vramshare ps` would print at that moment. The
//! one thing kept between scrapes is each process's job identifiers, read
//! once from its environment (which does not change after it starts).

use std::path::Path;
use std::process::ExitCode;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use vramshare_common::files::{open_existing, FileError};
use vramshare_common::process::JobIds;
use vramshare_common::registry::{ProcessInfo, RegistryFile};
use vramshare_common::ring::{Ring, RingFile};

use crate::ps::{pools, PoolInfo};

/// What names a process's series: its pid and device, what it runs, its
/// pool and priority, and the scheduler's names for its job where its
/// environment has them (Slurm's job and step, a Kubernetes pod's name and
/// namespace as the downward API sets them); empty where not.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessLabels {
    pid: String,
    gpu: String,
    /// The GPU's PCI bus id (`gpu` is the process's own number, after
    /// `CUDA_VISIBLE_DEVICES`); empty while the shim has not learned it.
    bus_id: String,
    command: String,
    pool: String,
    priority: String,
    slurm_job_id: String,
    slurm_step_id: String,
    pod: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
    gpu: String,
}

/// Job identifiers by process (pid and start time), as read.
pub type Known = std::collections::HashMap<(u32, u64), JobIds>;

/// A gauge family registered under `name`.
fn gauges<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Gauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Gauge>::default();
    registry.register(name, help, family.clone());
    family
}

/// A counter family registered under `name` (the format adds `_total`).
fn counters(registry: &mut Registry, name: &str, help: &str) -> Family<ProcessLabels, Counter> {
    let family = Family::<ProcessLabels, Counter>::default();
    registry.register(name, help, family.clone());
    family
}

/// Bytes as a gauge's value (saturating past what the format's integer holds).
fn value(bytes: u64) -> i64 {
    bytes.min(i64::MAX as u64) as i64
}

/// The metrics text for the shared files in `dir`. Files no process has
/// made yet are no error (there is nothing to show); a file that cannot be
/// used sets `vramshare_up` to 0, with why on stderr.
pub fn metrics(dir: &Path, known: &mut Known) -> String {
    let mut registry = Registry::default();
    let up = Gauge::<i64>::default();
    registry.register(
        "vramshare_up",
        "Whether the shared files could be read (1) or not (0)",
        up.clone(),
    );
    registry.register(
        "vramshare_build",
        "The exporter's version",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    let mut failed = false;
    let mut fail = |why: String| {
        crate::out::complain(&format!("exporter: {why}"));
        failed = true;
    };
    let processes = match crate::ps::registry(dir) {
        Ok(registry) => registry.live(),
        Err(_)
            if matches!(
                open_existing::<RegistryFile>(dir),
                Err(FileError::Missing(_))
            ) =>
        {
            Vec::new()
        }
        Err(why) => {
            fail(why);
            Vec::new()
        }
    };
    let pool_table = pools(dir).unwrap_or_else(|why| {
        fail(why);
        Vec::new()
    });
    known.retain(|(pid, start), _| {
        processes
            .iter()
            .any(|p| p.pid == *pid && p.start_time == *start)
    });
    for process in &processes {
        known
            .entry((process.pid, process.start_time))
            .or_insert_with(|| JobIds::of(process.pid));
    }
    process_metrics(&mut registry, &processes, &pool_table, known);
    pool_metrics(&mut registry, &pool_table);
    let lost = Counter::<u64>::default();
    registry.register(
        "vramshare_ring_events_lost",
        "Events the shared trace ring lost: dropped by writers that found it a lap behind",
        lost.clone(),
    );
    match open_existing::<RingFile>(dir) {
        Ok(map) => match Ring::new(map) {
            Ok(ring) => {
                lost.inc_by(ring.dropped());
            }
            Err(why) => fail(format!("{}: {why}", dir.join("ring").display())),
        },
        Err(FileError::Missing(_)) => {}
        Err(error) => fail(error.to_string()),
    }
    up.set(i64::from(!failed));
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

fn process_metrics(
    registry: &mut Registry,
    processes: &[ProcessInfo],
    pools: &[PoolInfo],
    known: &Known,
) {
    let device = gauges(
        registry,
        "vramshare_device_bytes",
        "Bytes the process holds on the device",
    );
    let spilled = gauges(
        registry,
        "vramshare_spilled_bytes",
        "Bytes of the process's allocations in host memory",
    );
    let quota = gauges(
        registry,
        "vramshare_quota_bytes",
        "The process's quota on the device (absent: none)",
    );
    let peak = gauges(
        registry,
        "vramshare_peak_device_bytes",
        "The most bytes the process held on the device at once",
    );
    let allocations = counters(
        registry,
        "vramshare_allocations",
        "Allocations the process made",
    );
    let spills = counters(
        registry,
        "vramshare_spills",
        "Allocations placed in host memory, over the quota",
    );
    let promotions = counters(
        registry,
        "vramshare_promotions",
        "Moves of spilled blocks back onto the device",
    );
    let rejections = counters(
        registry,
        "vramshare_rejections",
        "Allocations that failed: refused over the quota with spill off, or refused by CUDA",
    );
    let moved = counters(
        registry,
        "vramshare_moved_bytes",
        "Bytes the spill tier moved between the device and host memory, both ways",
    );
    for process in processes {
        let pool = process
            .pool
            .and_then(|index| pools.iter().find(|p| p.index == index))
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let JobIds {
            slurm_job_id,
            slurm_step_id,
            pod,
            namespace,
            ..
        } = known
            .get(&(process.pid, process.start_time))
            .cloned()
            .unwrap_or_default();
        for (gpu, counts) in &process.devices {
            let labels = ProcessLabels {
                pid: process.pid.to_string(),
                gpu: gpu.to_string(),
                bus_id: counts.bus_id.clone().unwrap_or_default(),
                command: process.cmdline.clone(),
                pool: pool.clone(),
                priority: process.priority.name().to_string(),
                slurm_job_id: slurm_job_id.clone(),
                slurm_step_id: slurm_step_id.clone(),
                pod: pod.clone(),
                namespace: namespace.clone(),
            };
            device
                .get_or_create(&labels)
                .set(value(counts.device_bytes));
            spilled
                .get_or_create(&labels)
                .set(value(counts.spilled_bytes));
            if let Some(q) = counts.quota {
                quota.get_or_create(&labels).set(value(q));
            }
            peak.get_or_create(&labels).set(value(counts.peak_device));
            allocations
                .get_or_create(&labels)
                .inc_by(counts.allocations);
            spills.get_or_create(&labels).inc_by(counts.spills);
            promotions.get_or_create(&labels).inc_by(counts.promotions);
            rejections.get_or_create(&labels).inc_by(counts.rejections);
            moved.get_or_create(&labels).inc_by(counts.moved_bytes);
        }
    }
}

fn pool_metrics(registry: &mut Registry, pools: &[PoolInfo]) {
    let budget = gauges(
        registry,
        "vramshare_pool_budget_bytes",
        "The pool's budget on the device (absent: none)",
    );
    let held = gauges(
        registry,
        "vramshare_pool_device_bytes",
        "Bytes the pool's members hold on the device together",
    );
    for pool in pools {
        for (gpu, limit, bytes) in &pool.devices {
            let labels = PoolLabels {
                pool: pool.name.clone(),
                gpu: gpu.to_string(),
            };
            if let Some(limit) = limit {
                budget.get_or_create(&labels).set(value(*limit));
            }
            held.get_or_create(&labels).set(value(*bytes));
        }
    }
}

/// Answers being written at once, at most: past that a scrape is told to
/// come back (503) rather than a thread made for it.
const MAX_IN_FLIGHT: usize = 16;

/// An answer's thread, counted out of those in flight when it ends.
struct Leaving<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The page at `/`: where the metrics are.
const INDEX: &str = "<!doctype html><title>vramshare exporter</title><h1>vramshare exporter</h1><p><a href=\"/metrics\">Metrics</a></p>\n";

/// A listener on `listen` whose connections send each write at once: a
/// scraper keeps its connection open between scrapes, and with Nagle's
/// rule the end of an answer would wait for its delayed acknowledgement
/// (40 ms on Linux). Linux gives accepted sockets the listener's setting.
fn listener(listen: &str) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind(listen)?;
    let on: libc::c_int = 1;
    // SAFETY: a live socket of ours, and an int option of the size given.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        crate::out::complain(&format!(
            "exporter: cannot set TCP_NODELAY ({}); scrapes may wait 40 ms",
            std::io::Error::last_os_error()
        ));
    }
    Ok(listener)
}

/// Serves `/metrics` on `listen` until killed.
pub fn serve(dir: &Path, listen: &str) -> ExitCode {
    let refused = |why: String| {
        crate::out::complain(&format!("exporter: cannot listen on {listen}: {why} (give --listen HOST:PORT, for example 127.0.0.1:9400 or 0.0.0.0:9400; port 0 takes a free one)"));
        ExitCode::from(2)
    };
    let socket = match listener(listen) {
        Ok(socket) => socket,
        Err(why) => return refused(why.to_string()),
    };
    // The address bound, which names the port taken when 0 was asked for.
    let bound = socket
        .local_addr()
        .map_or_else(|_| listen.to_string(), |a| a.to_string());
    let server = match tiny_http::Server::from_listener(socket, None) {
        Ok(server) => server,
        Err(why) => return refused(why.to_string()),
    };
    crate::out::complain(&format!(
        "exporter: serving the shared files of {} on http://{bound}/metrics",
        dir.display()
    ));
    let header = |name: &str, value: &str| {
        tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
            .expect("a header of ASCII words")
    };
    let known = std::sync::Arc::new(std::sync::Mutex::new(Known::new()));
    let in_flight = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let dir = std::sync::Arc::new(dir.to_path_buf());
    for request in server.incoming_requests() {
        use std::sync::atomic::Ordering::SeqCst;
        // Each answer on a thread of its own: a client that never reads
        // its answer holds one thread, not every later scrape.
        if in_flight.fetch_add(1, SeqCst) >= MAX_IN_FLIGHT {
            in_flight.fetch_sub(1, SeqCst);
            let busy = tiny_http::Response::from_string("busy: too many scrapes at once\n")
                .with_status_code(503);
            let _ = request.respond(busy);
            continue;
        }
        let (known, in_flight, dir) = (known.clone(), in_flight.clone(), dir.clone());
        std::thread::spawn(move || {
            // Counted out however the answer ends.
            let _leaving = Leaving(&in_flight);
            let path = request.url().split('?').next().unwrap_or("");
            let response = match (request.method(), path) {
                (tiny_http::Method::Get, "/metrics") => {
                    let text = {
                        let mut known = known.lock().unwrap_or_else(|e| e.into_inner());
                        metrics(&dir, &mut known)
                    };
                    tiny_http::Response::from_string(text).with_header(header(
                        "Content-Type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ))
                }
                (tiny_http::Method::Get, "/") => tiny_http::Response::from_string(INDEX)
                    .with_header(header("Content-Type", "text/html; charset=utf-8")),
                _ => tiny_http::Response::from_string("not found: the metrics are at /metrics\n")
                    .with_status_code(404),
            };
            // A scraper that went away mid-answer is no concern of the next one.
            let _ = request.respond(response);
        });
    }
    ExitCode::SUCCESS
}
