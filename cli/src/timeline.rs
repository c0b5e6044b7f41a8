//! `vramshare timeline`: a trace (a file, or the live ring) as pictures over
//! time. `-o FILE.json` writes Chrome's trace-event format, which
//! ui.perfetto.dev and chrome://tracing open as it is: per process, counter
//! tracks of device bytes, spilled bytes and the quota; instants for
//! spills, moves and rejections; each allocation's life as an async slice.
//! `-o FILE.html` writes one self-contained page (no network: its script
//! and data are inline) drawing the same per process and device.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};
use vramshare_common::size::human_bytes;
use vramshare_common::trace_json::TraceJson;

use crate::out::Failure;
use crate::replay::{pids, replay, Replay};

/// Where the trace comes from: a file, or the shared ring in `dir`.
pub fn load(file: Option<&Path>, dir: &Path, pid: Option<u32>) -> Result<TraceJson, Failure> {
    let Some(file) = file else {
        return crate::dump::ring_trace(dir, pid);
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    Ok(TraceJson::parse(&text).map_err(|why| format!("{}: {why}", file.display()))?)
}

pub fn timeline(trace: &TraceJson, pid: Option<u32>, output: &Path) -> Result<ExitCode, Failure> {
    let lost = trace.events_lost.unwrap_or(0)
        + trace
            .processes
            .iter()
            .map(|p| p.events_dropped)
            .sum::<u64>();
    if lost > 0 {
        crate::out::complain(&format!("timeline: {lost} events were lost before this trace was read; blocks whose frees or moves were among them are drawn where they were last seen"));
    }
    let replayed = replay(trace, pid);
    let html = output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
    let text = if html {
        page(trace, pid, &replayed)
    } else {
        serde_json::to_string(&trace_events(trace, pid, &replayed)).map_err(|e| e.to_string())?
    };
    std::fs::write(output, text + "\n")
        .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Microseconds since the trace's first event.
fn micros(replay: &Replay, t_ns: u64) -> f64 {
    t_ns.saturating_sub(replay.start_ns) as f64 / 1e3
}

fn process_name(trace: &TraceJson, pid: u32) -> String {
    let cmdline = trace
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .map(|p| p.cmdline.as_str())
        .unwrap_or("");
    if cmdline.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid}: {cmdline}")
    }
}

/// The trace-event JSON: one process per pid.
pub fn trace_events(trace: &TraceJson, pid: Option<u32>, replay: &Replay) -> Value {
    let mut events = Vec::new();
    for pid in pids(trace, pid) {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
            "args": {"name": process_name(trace, pid)}}),
        );
    }
    for point in &replay.points {
        let mut args = json!({
            "device bytes": point.held.device_bytes,
            "spilled bytes": point.held.spilled_bytes,
        });
        if let Some(quota) = point.limits.quota {
            args["quota"] = json!(quota);
        }
        if let Some(budget) = point.limits.budget {
            args["pool budget"] = json!(budget);
        }
        events.push(
            json!({"ph": "C", "name": format!("GPU {}", point.device), "pid": point.pid,
            "tid": 0, "ts": micros(replay, point.t_ns), "args": args}),
        );
    }
    let end = replay.end_ns;
    // Async slices are grouped into tracks by name: one for allocations
    // made on the device, one for those spilled.
    for (index, life) in replay.lives.iter().enumerate() {
        let name = if life.placement == "device" {
            "allocated on the device"
        } else {
            "allocated in host memory"
        };
        let id = format!("{:#x}.{index}", life.ptr);
        let args = json!({"ptr": format!("{:#x}", life.ptr), "size": life.size,
            "bytes": human_bytes(life.size), "call": life.api, "placement": life.placement,
            "device": life.device, "moves": life.moves.len()});
        let begin = micros(replay, life.born_ns);
        let finish = micros(replay, life.freed_ns.unwrap_or(end));
        events.push(
            json!({"ph": "b", "cat": "allocation", "name": name, "id": id,
            "pid": life.pid, "tid": 0, "ts": begin, "args": args}),
        );
        events.push(
            json!({"ph": "e", "cat": "allocation", "name": name, "id": id,
            "pid": life.pid, "tid": 0, "ts": finish}),
        );
    }
    for event in trace
        .events
        .iter()
        .filter(|e| pid.is_none_or(|p| e.pid == p))
    {
        let Some(kind) = instant_kind(&event.op, event.placement.as_deref(), event.rc) else {
            continue;
        };
        // A limit's size is the new limit, or none.
        let size = match (event.op.as_str(), event.size) {
            ("quota" | "budget", u64::MAX) => "to none".to_string(),
            ("quota" | "budget", size) => format!("to {}", human_bytes(size)),
            (_, size) => human_bytes(size),
        };
        events.push(
            json!({"ph": "i", "s": "p", "name": format!("{kind} {size}"),
            "pid": event.pid, "tid": 0, "ts": micros(replay, event.t_ns),
            "args": {"ptr": event.ptr, "size": event.size, "api": event.api,
                "device": event.device, "rc": event.rc}}),
        );
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms",
        "otherData": {"source": "vramshare", "schema": trace.schema}})
}

/// What an event is marked as on the timeline, if anything.
fn instant_kind(op: &str, placement: Option<&str>, rc: i32) -> Option<&'static str> {
    match (op, placement) {
        ("alloc", Some("host")) if rc == 0 => Some("spill"),
        ("promote", _) if rc == 0 => Some("promotion"),
        ("demote", _) if rc == 0 => Some("demotion"),
        ("reject", _) => Some("rejection"),
        ("quota", _) => Some("quota change"),
        ("budget", _) => Some("pool budget change"),
        _ => None,
    }
}

/// The script that draws the page, inline.
const SCRIPT: &str = include_str!("timeline.js");

/// JSON safe inside a `<script>` element.
fn inline_json(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The self-contained page.
pub fn page(trace: &TraceJson, pid: Option<u32>, replay: &Replay) -> String {
    let end = replay.end_ns;
    let mut charts = Vec::new();
    for pid in pids(trace, pid) {
        let mut devices: Vec<i32> = replay
            .points
            .iter()
            .filter(|p| p.pid == pid)
            .map(|p| p.device)
            .collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let points: Vec<Value> = replay
                .points
                .iter()
                .filter(|p| p.pid == pid && p.device == device)
                .map(|p| {
                    json!([
                        micros(replay, p.t_ns) / 1e3,
                        p.held.device_bytes,
                        p.held.spilled_bytes,
                        p.limits.quota
                    ])
                })
                .collect();
            let marks: Vec<Value> = trace
                .events
                .iter()
                .filter(|e| e.pid == pid && e.device == device)
                .filter_map(|e| {
                    let kind = instant_kind(&e.op, e.placement.as_deref(), e.rc)?;
                    Some(json!([micros(replay, e.t_ns) / 1e3, kind, e.size, e.ptr]))
                })
                .collect();
            charts.push(
                json!({"title": format!("{} — GPU {device}", process_name(trace, pid)),
                "points": points, "marks": marks,
                "end": micros(replay, end) / 1e3}),
            );
        }
    }
    let mut largest: Vec<&crate::replay::Life> = replay.lives.iter().collect();
    largest.sort_by(|a, b| b.size.cmp(&a.size).then(a.born_ns.cmp(&b.born_ns)));
    let blocks: Vec<Value> = largest
        .iter()
        .take(20)
        .map(|l| {
            json!({"pid": l.pid, "device": l.device, "ptr": format!("{:#x}", l.ptr),
            "size": l.size, "api": l.api, "placement": crate::replay::current(l),
            "moves": l.moves.len(), "born_ms": micros(replay, l.born_ns) / 1e3,
            "freed_ms": l.freed_ns.map(|t| micros(replay, t) / 1e3)})
        })
        .collect();
    let data = json!({"charts": charts, "blocks": blocks, "events": trace.events.len()});
    let title = match pid {
        Some(pid) => format!("vramshare timeline, pid {pid}"),
        None => "vramshare timeline".to_string(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n<p class=\"legend\"><span class=\"key device\"></span> on the device <span class=\"key spilled\"></span> spilled to host memory <span class=\"key quota\"></span> quota &nbsp; marks: spill, promotion, demotion, rejection</p>\n<div id=\"charts\"></div>\n<h2>Largest allocations</h2>\n<table id=\"blocks\"><thead><tr><th>pid</th><th>GPU</th><th>address</th><th>size</th><th>call</th><th>where</th><th>moves</th><th>made (ms)</th><th>freed (ms)</th></tr></thead><tbody></tbody></table>\n<div id=\"tip\" hidden></div>\n<script type=\"application/json\" id=\"data\">{}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>",
        inline_json(&data),
        title = escape_html(&title),
    )
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:2em}.chart{margin:1em 0}.chart h3{font-size:1em;margin:.2em 0}svg{border:1px solid #ccc;background:#fff}.key{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 1em;vertical-align:middle}.key.device{background:#4c78a8}.key.spilled{background:#f58518}.key.quota{border-top:2px dashed #d62728;height:0}table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}#tip{position:fixed;background:#222;color:#fff;padding:4px 8px;border-radius:4px;font-size:12px;pointer-events:none;white-space:pre}";
