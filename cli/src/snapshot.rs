//! `vramshare snapshot`: a trace as a PyTorch memory snapshot (the pickle
//! `torch.cuda.memory._dump_snapshot` writes), for pytorch.org/memory_viz or
//! `torch.cuda._memory_viz`. Each live allocation is a segment holding one
//! block; `device_traces` has each allocation's `segment_alloc` and
//! `alloc`, and each free's `free_requested`, `free_completed` and
//! `segment_free`. Where a block lives is its frame's name, which
//! memory_viz shows beside it: on the device, or spilled to host memory.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use vramshare_common::size::human_bytes;
use vramshare_common::trace_json::TraceJson;

use crate::out::Failure;
use crate::replay::{current, replay, Life};

#[derive(Serialize)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    pub device_traces: Vec<Vec<TraceEntry>>,
}

#[derive(Serialize, Clone)]
pub struct Frame {
    pub filename: String,
    pub line: u32,
    pub name: String,
}

#[derive(Serialize)]
pub struct Segment {
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    pub segment_type: &'static str,
    pub segment_pool_id: (u64, u64),
    pub is_expandable: bool,
    pub frames: Vec<Frame>,
    pub blocks: Vec<SegmentBlock>,
}

#[derive(Serialize)]
pub struct SegmentBlock {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: &'static str,
    pub frames: Vec<Frame>,
}

#[derive(Serialize)]
pub struct TraceEntry {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: u64,
    pub frames: Vec<Frame>,
}

/// The frame that says where a block lives (`at`: "device" or "host",
/// with `head` bytes of it on the device) and whose it is.
fn placement_frame(life: &Life, at: &str, head: u64) -> Frame {
    let place = match at {
        "device" => "on the device".to_string(),
        _ if head > 0 => format!(
            "spilled to host memory ({} of it on the device)",
            human_bytes(head)
        ),
        _ => "spilled to host memory".to_string(),
    };
    Frame {
        filename: "vramshare".into(),
        line: 0,
        name: format!("pid {} {}: {place}", life.pid, life.api),
    }
}

pub fn build(trace: &TraceJson, pid: Option<u32>) -> Snapshot {
    let replayed = replay(trace, pid);
    let devices = replayed
        .lives
        .iter()
        .map(|l| l.device.max(0) as usize + 1)
        .max()
        .unwrap_or(1);
    let mut timed: Vec<Vec<(u64, TraceEntry)>> = (0..devices).map(|_| Vec::new()).collect();
    let mut segments = Vec::new();
    for life in &replayed.lives {
        let made = vec![placement_frame(life, &life.placement, life.device_part)];
        let entry = |action, time_ns: u64, frames: &Vec<Frame>| TraceEntry {
            action,
            addr: life.ptr,
            size: life.size,
            stream: 0,
            time_us: time_ns / 1000,
            frames: frames.clone(),
        };
        let list = &mut timed[life.device.max(0) as usize];
        list.push((life.born_ns, entry("segment_alloc", life.born_ns, &made)));
        list.push((life.born_ns, entry("alloc", life.born_ns, &made)));
        match life.freed_ns {
            Some(freed) => {
                for action in ["free_requested", "free_completed", "segment_free"] {
                    list.push((freed, entry(action, freed, &made)));
                }
            }
            None => {
                let now = vec![placement_frame(life, current(life), life.head)];
                segments.push(Segment {
                    device: life.device,
                    address: life.ptr,
                    total_size: life.size,
                    allocated_size: life.size,
                    active_size: life.size,
                    requested_size: life.size,
                    stream: 0,
                    segment_type: "large",
                    segment_pool_id: (0, 0),
                    is_expandable: false,
                    frames: now.clone(),
                    blocks: vec![SegmentBlock {
                        address: life.ptr,
                        size: life.size,
                        requested_size: life.size,
                        state: "active_allocated",
                        frames: now,
                    }],
                });
            }
        }
    }
    let device_traces = timed
        .into_iter()
        .map(|mut list| {
            // Stable: an allocation's own entries keep their order.
            list.sort_by_key(|(t, _)| *t);
            list.into_iter().map(|(_, entry)| entry).collect()
        })
        .collect();
    Snapshot {
        segments,
        device_traces,
    }
}

pub fn snapshot(trace: &TraceJson, pid: Option<u32>, output: &Path) -> Result<ExitCode, Failure> {
    let pids = crate::replay::pids(trace, None);
    if pid.is_none() && pids.len() > 1 {
        crate::out::complain(&format!("snapshot: the trace holds {} processes, whose addresses may coincide; memory_viz shows one process best (give --pid PID)", pids.len()));
    }
    let bytes = serde_pickle::to_vec(&build(trace, pid), serde_pickle::SerOptions::new())
        .map_err(|e| e.to_string())?;
    std::fs::write(output, bytes).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    Ok(ExitCode::SUCCESS)
}
