//! `vramshare timeline` and `snapshot` from a real run of the test client
//! on the fake runtime: the timeline as Chrome's trace-event format, the
//! snapshot as PyTorch's memory-snapshot pickle (loaded by Python's own
//! `pickle`), and the page opened in headless Chromium where installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// A run that allocates 8 MiB, spills most of 64 MiB over its 32 MiB
/// quota, frees the first and allocates 4 MiB: its trace, written to a file
/// in `dir`.
fn traced_run(dir: &Path) -> (PathBuf, Value) {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:a:8M",
            "malloc:b:64M",
            "free:a",
            "malloc:c:4M",
            "sleep:20",
        ],
    );
    run.assert_ok();
    let path = dir.join("trace.json");
    std::fs::write(&path, run.trace().to_string()).unwrap();
    (path, run.trace().clone())
}

fn vramshare(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vramshare {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_timeline_is_chrome_trace_events_with_counters_instants_and_one_process_per_pid() {
    let dir = tempfile::tempdir().unwrap();
    let (trace_path, trace) = traced_run(dir.path());
    let pid = trace["processes"][0]["pid"].as_u64().unwrap();
    let out = dir.path().join("timeline.json");
    vramshare(&[
        "timeline",
        trace_path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let timeline: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    // Every event has a phase, a pid, and (but metadata) a timestamp in
    // microseconds, a number.
    for event in events {
        assert!(event["ph"].is_string() && event["pid"].is_u64(), "{event}");
        if event["ph"] != "M" {
            assert!(event["ts"].is_number(), "{event}");
        }
    }
    let names: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .collect();
    assert_eq!(names.len(), 1, "one process: {names:?}");
    assert_eq!(names[0]["pid"], pid);
    // The counters end where the run's bytes were: 64 + 4 MiB in all, at
    // most the quota on the device; the quota is a series of its own.
    let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(counters.len(), 4, "one a change: {counters:?}");
    let last = &counters.last().unwrap()["args"];
    let held = last["device bytes"].as_u64().unwrap() + last["spilled bytes"].as_u64().unwrap();
    assert_eq!(held, 68 * MIB, "{last}");
    assert!(last["device bytes"].as_u64().unwrap() <= 32 * MIB);
    assert_eq!(last["quota"], 32 * MIB);
    let times: Vec<f64> = counters.iter().map(|c| c["ts"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // The spill is an instant, process-scoped.
    let spills: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("spill"))
        .collect();
    assert_eq!(spills.len(), 1, "{spills:?}");
    assert_eq!(spills[0]["s"], "p");
    // Each allocation's life: a begin and an end of one id, category and
    // name, the name saying where it was made (the tracks Perfetto draws).
    let begins: Vec<&Value> = events.iter().filter(|e| e["ph"] == "b").collect();
    let ends: Vec<&Value> = events.iter().filter(|e| e["ph"] == "e").collect();
    assert_eq!((begins.len(), ends.len()), (3, 3));
    for begin in &begins {
        let end = ends
            .iter()
            .find(|e| e["id"] == begin["id"])
            .unwrap_or_else(|| panic!("no end for {begin}"));
        assert_eq!((&end["cat"], &end["name"]), (&begin["cat"], &begin["name"]));
        assert!(end["ts"].as_f64() >= begin["ts"].as_f64(), "{begin} {end}");
    }
    let spilled: Vec<&&Value> = begins
        .iter()
        .filter(|b| b["name"] == "allocated in host memory")
        .collect();
    assert_eq!(spilled.len(), 1, "{begins:?}");
    assert_eq!(spilled[0]["args"]["size"], 64 * MIB);
}

#[test]
fn the_snapshot_is_a_pytorch_memory_snapshot_that_pythons_pickle_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (trace_path, _) = traced_run(dir.path());
    let out = dir.path().join("snapshot.pickle");
    vramshare(&[
        "snapshot",
        trace_path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let check = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
segs = s["segments"]
assert len(segs) == 2, segs
sizes = sorted(seg["total_size"] for seg in segs)
assert sizes == [4 << 20, 64 << 20], sizes
for seg in segs:
    for key in ("device", "address", "allocated_size", "active_size", "requested_size",
                "stream", "segment_type", "segment_pool_id", "is_expandable", "frames"):
        assert key in seg, key
    (block,) = seg["blocks"]
    assert block["address"] == seg["address"] and block["size"] == seg["total_size"]
    assert block["state"] == "active_allocated"
    where = block["frames"][0]["name"]
    assert ("spilled" in where) == (seg["total_size"] == 64 << 20), where
(trace,) = s["device_traces"]
actions = [e["action"] for e in trace]
assert actions.count("segment_alloc") == 3 and actions.count("alloc") == 3, actions
assert actions.count("free_completed") == 1 and actions.count("segment_free") == 1, actions
times = [e["time_us"] for e in trace]
assert times == sorted(times), times
for e in trace:
    assert set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"}, e
print("ok")
"#;
    let python = Command::new("python3")
        .args(["-c", check])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&python.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&python.stderr)
    );
}

#[test]
fn the_page_draws_in_headless_chromium_with_no_errors_and_no_requests() {
    let Some(chromium) = installed(
        &["chromium", "chromium-browser"],
        "chromium",
        "VRAMSHARE_REQUIRE_CHROMIUM",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (trace_path, _) = traced_run(dir.path());
    let page = dir.path().join("timeline.html");
    vramshare(&[
        "timeline",
        trace_path.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&page).unwrap();
    for outside in ["http://", "https://", "//cdn", "src=\""] {
        let found = text.replace("http://www.w3.org/2000/svg", "");
        assert!(!found.contains(outside), "the page names {outside}");
    }
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", page.display());
    let base = |extra: &[&str]| {
        let mut command = Command::new(&chromium);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            // Every host resolves to nothing: a request that tried to leave
            // the page would fail and show in the log.
            .arg("--host-resolver-rules=MAP * ~NOTFOUND")
            .args(["--enable-logging=stderr", "--v=0", "--window-size=1000,900"])
            .args(extra)
            .arg(&url);
        command.output().unwrap()
    };
    let net_log = dir.path().join("net.json");
    let dom = base(&[
        "--dump-dom",
        &format!("--log-net-log={}", net_log.display()),
    ]);
    let html = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(
        html.contains("data-drawn=\"1\""),
        "the script ran and drew one chart:\n{html}\n{log}"
    );
    assert!(
        html.contains("class=\"device\"") && html.contains("class=\"spilled\""),
        "{html}"
    );
    assert!(html.contains("class=\"quota\""), "{html}");
    assert!(html.contains("class=\"mark spill\""), "{html}");
    assert_eq!(
        html.matches("<tr>").count(),
        4,
        "a header and three allocations: {html}"
    );
    for bad in ["Uncaught", "ERR_NAME_NOT_RESOLVED", "Failed to load"] {
        assert!(!log.contains(bad), "{bad} in Chromium's log:\n{log}");
    }
    // No request left the page: the network log names no URL but those of
    // Chromium's own services, which it calls whatever page it opens.
    let net = std::fs::read_to_string(&net_log).unwrap();
    let own = ["google.com/", "gvt1.com/", "googleapis.com/"];
    for url in net.split("\"url\":\"").skip(1) {
        let url = &url[..url.find('"').unwrap_or(url.len())];
        let outside = url.starts_with("http") && !own.iter().any(|host| url.contains(host));
        assert!(!outside, "the page asked for {url}");
    }
    let shot = artifacts().join("timeline.png");
    let screenshot = base(&[&format!("--screenshot={}", shot.display())]);
    assert!(
        shot.metadata().is_ok_and(|m| m.len() > 1000),
        "{}",
        String::from_utf8_lossy(&screenshot.stderr)
    );
}

/// Where tests keep what a person may want to look at afterwards.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_quota_set_while_the_job_runs_is_marked_and_the_quota_track_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    let trace = dir.path().join("trace.json");
    let trace_var = trace.display().to_string();
    let steps = ["malloc:a:8M", "sleep:1500", "malloc:b:4M"];
    let env = [
        ("VRAMSHARE_QUOTA", "32MiB"),
        ("VRAMSHARE_TRACE", trace_var.as_str()),
    ];
    let child = client_command(&shm, &env, &steps).spawn().unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(500));
    vramshare(&[
        "quota",
        "set",
        "--pid",
        &pid,
        "16MiB",
        "--dir",
        shm.to_str().unwrap(),
    ]);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let timeline_path = dir.path().join("timeline.json");
    vramshare(&[
        "timeline",
        &trace_var,
        "-o",
        timeline_path.to_str().unwrap(),
    ]);
    let timeline: Value =
        serde_json::from_str(&std::fs::read_to_string(&timeline_path).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    let marks: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("quota change"))
        .collect();
    assert_eq!(marks.len(), 1, "{events:?}");
    assert_eq!(marks[0]["name"], "quota change to 16.00 MiB");
    let quotas: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["args"]["quota"].as_u64().unwrap())
        .collect();
    assert_eq!(
        quotas,
        [32 * MIB, 16 * MIB, 16 * MIB],
        "alloc, change, alloc"
    );
}
