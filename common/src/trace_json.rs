//! The trace as JSON, schema `vramshare-trace/1`, every field of which is
//! described in `docs/trace-format.md`: written by the shim at exit
//! (`VRAMSHARE_TRACE`) and by `vramshare dump`, read by `vramshare report`.
//! Fields beyond the schema's minimum have defaults, so that a file with
//! only the minimum still reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::{Api, Event, Op, Placement};
use crate::registry::DeviceInfo;

mod moves;
pub use moves::{
    HostCallJson, MovesJson, MovesSample, ReplayMiss, StepPeakJson, MOVES_SAMPLES_MAX,
};

pub const SCHEMA: &str = "vramshare-trace/1";

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EventJson {
    pub seq: u64,
    pub t_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    pub op: String,
    pub api: String,
    pub ptr: String,
    pub size: u64,
    pub placement: Option<String>,
    pub rc: i32,
    /// A spilled block's head that lives on the device, in bytes (absent: 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device_part: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl From<&Event> for EventJson {
    fn from(e: &Event) -> Self {
        EventJson {
            seq: e.seq,
            t_ns: e.t_ns,
            pid: e.pid,
            tid: e.tid,
            device: e.device,
            op: e
                .op()
                .map_or_else(|| format!("unknown-{}", e.op), |op| op.name().to_string()),
            api: e.api().map_or_else(
                || format!("unknown-{}", e.api),
                |api| api.name().to_string(),
            ),
            ptr: format!("{:#x}", e.ptr),
            size: e.size,
            placement: match e.placement() {
                Some(placement) => placement.json_name().map(str::to_string),
                None => Some(format!("unknown-{}", e.placement)),
            },
            rc: e.rc,
            device_part: e.device_part(),
        }
    }
}

impl EventJson {
    pub fn op(&self) -> Option<Op> {
        Op::from_name(&self.op)
    }
    pub fn api(&self) -> Option<Api> {
        Api::from_name(&self.api)
    }
    pub fn placement(&self) -> Option<Placement> {
        self.placement.as_deref().and_then(Placement::from_name)
    }
    /// Bytes an allocation placed on the host (all of a spilled block but
    /// its head on the device).
    pub fn spilled_bytes(&self) -> u64 {
        match (self.op(), self.placement()) {
            (Some(Op::Alloc), Some(Placement::Host)) => self.size.saturating_sub(self.device_part),
            _ => 0,
        }
    }

    pub fn ptr_value(&self) -> Option<u64> {
        u64::from_str_radix(self.ptr.trim_start_matches("0x"), 16).ok()
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub allocations: u64,
    pub spills: u64,
    pub promotions: u64,
    pub rejections: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LeakJson {
    pub ptr: String,
    pub size: u64,
    #[serde(default)]
    pub device: u32,
    #[serde(default)]
    pub placement: String,
    #[serde(default)]
    pub api: String,
}

/// Per-device maps are keyed by the device ordinal as a string, as in JSON.
pub type PerDevice = BTreeMap<String, u64>;

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct ProcessJson {
    pub pid: u32,
    pub cmdline: String,
    pub quota: PerDevice,
    pub spill: String,
    pub peak_device: PerDevice,
    pub peak_spilled: PerDevice,
    /// Bytes held at exit (or, in a dump, at the moment of the dump).
    pub device_in_use: PerDevice,
    pub spilled_in_use: PerDevice,
    pub counts: BTreeMap<String, Counts>,
    /// Allocations never freed; empty in a dump of live processes.
    pub leaked: Vec<LeakJson>,
    pub events_dropped: u64,
    /// The CUDA runtime the process loaded (or, for a driver-only program,
    /// the driver), and the runtime's version (0 if it was never asked).
    pub runtime: String,
    pub runtime_version: i32,
    /// Kernel launches the shim saw, by the call that made them (absent
    /// where there were none, and in a dump).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub launches: BTreeMap<String, u64>,
    /// The same launches, and the library calls read for operands, by what
    /// their operands named (absent where there were none, and in a dump).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub coverage: BTreeMap<String, CoverageJson>,
    /// Math library calls whose operands were read, by call.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub library_calls: BTreeMap<String, u64>,
    /// Copies and memsets whose operands were read, by call.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub copies: BTreeMap<String, u64>,
    /// What the launches touched, block by block (absent in a dump, and
    /// where nothing was launched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessJson>,
    /// The spill tier's moves (absent where it made none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moves: Option<MovesJson>,
    /// CUDA's stream-ordered pools' growths at allocations (absent where
    /// none grew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsJson>,
}

/// What CUDA's stream-ordered pools grew by at allocations, as the shim
/// counted them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PoolsJson {
    /// Growths counted, and the largest.
    pub growths: u64,
    pub largest_growth: u64,
    /// The first growths (16 at most) that the room under the quota could
    /// not hold, each counted over the quota until the pool was trimmed.
    pub over_quota: Vec<PoolOverJson>,
}

/// One rise of a pool's unused reserve that did not fit under the quota.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PoolOverJson {
    /// When (CLOCK_MONOTONIC ns, as events), and on which device.
    pub t_ns: u64,
    pub device: u32,
    /// Whether it came at an allocation (else at a free).
    pub at_allocation: bool,
    /// The rise of the pool's unused reserve, and of it the new reserve
    /// (a growth; a free's bytes are not).
    pub slack_rise: u64,
    pub new_reserve: u64,
    /// The room held for the pools' growths that it took, and the room
    /// free under the quota beside that.
    pub held: u64,
    pub free: u64,
    /// The largest growth seen before it (what the room held was sized by).
    pub largest_before: u64,
    /// Bytes over the quota once the pool was trimmed (0: the trim gave
    /// the rise back).
    pub over: u64,
}

/// Launches of one call by what their operands named.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct CoverageJson {
    /// Their parameters named at least one live block.
    pub named: u64,
    /// Their parameters were read and named none.
    pub unnamed: u64,
    /// CUDA could not say where their parameters are.
    pub undecoded: u64,
    /// Made inside a library call whose operands were read instead.
    pub in_library: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct AccessJson {
    /// Steps begun: found from the repeating launch sequence, or marked by
    /// the job (`marked`).
    pub steps: u64,
    pub marked: bool,
    /// A step's length in launches, when found from the sequence.
    pub step_launches: u64,
    /// The latest complete step's bytes (absent before two steps began).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_step: Option<StepBytesJson>,
    /// Functions launched, and of those, the ones CUDA described.
    pub functions: u64,
    pub functions_described: u64,
    /// Uses of the blocks listed (launches, library calls, copies and
    /// memsets naming them), and of those, the ones that found their block
    /// in host memory (spilled).
    pub uses: u64,
    pub uses_in_host: u64,
    /// Every live block and the most used freed ones.
    pub blocks: Vec<BlockAccessJson>,
    /// Freed blocks' profiles not kept (past the bound).
    pub blocks_forgotten: u64,
    /// Times the launches' index of blocks was built (the first time, then
    /// after the ledger changed), and the time that took (on the threads
    /// that launch).
    pub index_rebuilds: u64,
    pub index_rebuild_seconds: f64,
    /// Where a trace is written and the job marks its steps: the last
    /// complete step's uses, in order (absent before a step completed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_uses: Option<StepUsesJson>,
}

/// One step's uses of blocks, in the order the job made them: each the
/// number of the trace's events recorded before it, and the starts of the
/// blocks it named (hexadecimal).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct StepUsesJson {
    pub step: u64,
    /// The trace's events recorded when the step began and when it ended.
    pub events_began: u64,
    pub events_ended: u64,
    pub uses: Vec<(u64, Vec<String>)>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct StepBytesJson {
    pub step: u64,
    /// Bytes of the blocks that lived through the step.
    pub live_bytes: u64,
    /// Of those, the bytes of blocks some launch named in it; by kernels'
    /// parameters, by library calls' operands, and by copies and memsets.
    pub touched_bytes: u64,
    pub touched_by_kernels: u64,
    pub touched_by_libraries: u64,
    pub touched_by_copies: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct BlockAccessJson {
    pub ptr: String,
    pub size: u64,
    pub device: u32,
    /// Where it lived at exit (`"device"`, `"host"`), or `"freed"`.
    pub placement: String,
    /// Launches that named it, in all, and of those, the ones that found
    /// it in host memory.
    pub uses: u64,
    pub uses_in_host: u64,
    /// Steps in which some launch named it, and steps it lived through.
    pub steps_used: u64,
    pub steps_alive: u64,
    /// Its uses in the latest complete step, if it was used in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_step: Option<StepUseJson>,
    /// The stream of its latest use.
    pub stream: String,
    /// `"kernel"`, `"library"`, `"copy"`: which kinds of call named it.
    pub via: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct StepUseJson {
    pub uses: u64,
    /// Launches into the step of its first and last use.
    pub first: u64,
    pub last: u64,
}

impl BlockAccessJson {
    /// Uses per step: in the latest complete step when steps were found
    /// (0 if it was not used in it), else all its uses.
    pub fn uses_per_step(&self, steps_found: bool) -> u64 {
        match (&self.last_step, steps_found) {
            (Some(step), _) => step.uses,
            (None, true) => 0,
            (None, false) => self.uses,
        }
    }
}

impl ProcessJson {
    /// Fills the per-device maps (quota, peaks, bytes in use, counts) from
    /// the counters of each device, as the shim keeps them and the registry
    /// shows them.
    pub fn with_devices(mut self, devices: &[(u32, DeviceInfo)]) -> ProcessJson {
        for (device, info) in devices {
            let key = device.to_string();
            if let Some(quota) = info.quota {
                self.quota.insert(key.clone(), quota);
            }
            self.peak_device.insert(key.clone(), info.peak_device);
            self.peak_spilled.insert(key.clone(), info.peak_spilled);
            self.device_in_use.insert(key.clone(), info.device_bytes);
            self.spilled_in_use.insert(key.clone(), info.spilled_bytes);
            let counts = Counts {
                allocations: info.allocations,
                spills: info.spills,
                promotions: info.promotions,
                rejections: info.rejections,
            };
            self.counts.insert(key, counts);
        }
        self
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TraceJson {
    pub schema: String,
    /// Processes of one job (one `VRAMSHARE_JOB`) share a trace file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// In a dump of the shared ring: events overwritten before they were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_lost: Option<u64>,
    pub processes: Vec<ProcessJson>,
    pub events: Vec<EventJson>,
}

impl TraceJson {
    pub fn new(processes: Vec<ProcessJson>, events: Vec<EventJson>) -> TraceJson {
        TraceJson {
            schema: SCHEMA.to_string(),
            job: None,
            events_lost: None,
            processes,
            events,
        }
    }

    /// Adds another process's trace to this one (same job, same file).
    pub fn merge(&mut self, other: TraceJson) {
        self.processes.extend(other.processes);
        self.events.extend(other.events);
        self.events.sort_by_key(|e| (e.t_ns, e.pid, e.seq));
    }

    /// Parses a trace, refusing another schema with a clear message.
    pub fn parse(text: &str) -> Result<TraceJson, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(other) => return Err(format!("schema {other:?}, not {SCHEMA:?}")),
            None => return Err(format!("no \"schema\" field (expected {SCHEMA:?})")),
        }
        serde_json::from_value(value).map_err(|e| format!("not a {SCHEMA} trace: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_design_example_parses() {
        let text = r#"{ "schema": "vramshare-trace/1",
          "processes": [ { "pid": 1234, "cmdline": "python train.py", "quota": {"0": 8589934592},
                           "peak_device": {"0": 1}, "peak_spilled": {"0": 0}, "leaked": [ {"ptr": "0x10", "size": 4096} ] } ],
          "events": [ { "seq": 7, "t_ns": 123456789, "pid": 1234, "tid": 1240, "device": 0,
                        "op": "alloc", "api": "cudaMalloc", "ptr": "0x7f00", "size": 50331648,
                        "placement": "device", "rc": 0 } ] }"#;
        let trace = TraceJson::parse(text).unwrap();
        assert_eq!(trace.processes[0].leaked[0].size, 4096);
        assert_eq!(trace.events[0].op(), Some(Op::Alloc));
        assert_eq!(trace.events[0].ptr_value(), Some(0x7f00));
    }

    #[test]
    fn other_schemas_are_refused() {
        assert!(
            TraceJson::parse(r#"{"schema": "x/2", "processes": [], "events": []}"#)
                .unwrap_err()
                .contains("x/2")
        );
        assert!(TraceJson::parse("{}")
            .unwrap_err()
            .contains("no \"schema\""));
        assert!(TraceJson::parse("[1,").unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn unknown_bytes_are_named_not_trusted() {
        let event = Event {
            op: 99,
            ..Event::default()
        };
        let json = EventJson::from(&event);
        assert_eq!(json.op, "unknown-99");
        assert_eq!(json.api, "cudaMalloc");
    }
}
