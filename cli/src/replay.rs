//! A trace's events replayed in order: what each process held on each
//! device, and in host memory, after each event, and every allocation's
//! life (where it was made, where it moved, when it was freed). The
//! pictures (`timeline`, `snapshot`) draw from this.

use std::collections::BTreeMap;

use vramshare_common::size::MAX_DEVICES;
use vramshare_common::trace_json::{EventJson, TraceJson};

/// An allocation from its `alloc` event to its `free` (or the trace's end).
#[derive(Debug, Clone, PartialEq)]
pub struct Life {
    pub pid: u32,
    pub device: i32,
    pub ptr: u64,
    pub size: u64,
    pub api: String,
    /// Where it was made: "device" or "host" (spilled), and the bytes of it
    /// then on the device (all of it, or a spilled block's head).
    pub placement: String,
    pub device_part: u64,
    /// The head on the device now (a move takes all of a block).
    pub head: u64,
    pub born_ns: u64,
    /// When it was freed (`None`: live at the trace's end).
    pub freed_ns: Option<u64>,
    /// Moves between device and host after it was made: (time, to where).
    pub moves: Vec<(u64, String)>,
}

/// What one process held on one device after an event.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub device_bytes: u64,
    pub spilled_bytes: u64,
}

/// One point of a process's counters: after the event at `t_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t_ns: u64,
    pub pid: u32,
    pub device: i32,
    pub held: Held,
    /// The quota and the pool's budget then, where known.
    pub limits: Limits,
}

/// A process's limits on one device.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub quota: Option<u64>,
    pub budget: Option<u64>,
}

/// A limit as a `quota` or `budget` event writes it (`u64::MAX`: none).
fn limit(value: u64) -> Option<u64> {
    (value != u64::MAX).then_some(value)
}

/// Each process's limits at the trace's start: the value before its first
/// change where the trace has one, else (for the quota) its record's.
fn first_limits(trace: &TraceJson, events: &[&EventJson]) -> BTreeMap<(u32, i32), Limits> {
    let mut first: BTreeMap<(u32, i32), Limits> = BTreeMap::new();
    for process in &trace.processes {
        for (device, quota) in &process.quota {
            if let Ok(device) = device.parse() {
                first.entry((process.pid, device)).or_default().quota = Some(*quota);
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for event in events {
        if (event.op == "quota" || event.op == "budget")
            && seen.insert((event.pid, event.device, event.op.clone()))
        {
            let limits = first.entry((event.pid, event.device)).or_default();
            let before = limit(address(&event.ptr));
            if event.op == "quota" {
                limits.quota = before;
            } else {
                limits.budget = before;
            }
        }
    }
    first
}

#[derive(Debug, Default)]
pub struct Replay {
    pub points: Vec<Point>,
    pub lives: Vec<Life>,
    /// The first event's time: pictures count from it.
    pub start_ns: u64,
    /// The trace's last event's time (of any process): where lives still
    /// open at its end are drawn to.
    pub end_ns: u64,
}

/// An address as the trace writes it (`0x…`).
pub fn address(text: &str) -> u64 {
    let digits = text.trim_start_matches("0x");
    u64::from_str_radix(digits, 16).unwrap_or(0)
}

/// The bytes of a block on the device and in host memory, where it is.
fn split(size: u64, placement: &str, device_part: u64) -> Held {
    if placement == "device" {
        Held {
            device_bytes: size,
            spilled_bytes: 0,
        }
    } else {
        let head = device_part.min(size);
        Held {
            device_bytes: head,
            spilled_bytes: size - head,
        }
    }
}

fn add(held: &mut Held, part: Held) {
    held.device_bytes = held.device_bytes.saturating_add(part.device_bytes);
    held.spilled_bytes = held.spilled_bytes.saturating_add(part.spilled_bytes);
}

fn sub(held: &mut Held, part: Held) {
    held.device_bytes = held.device_bytes.saturating_sub(part.device_bytes);
    held.spilled_bytes = held.spilled_bytes.saturating_sub(part.spilled_bytes);
}

/// Whether a move event changed where the block is: the spill tier's moves
/// (copies) count only when they succeeded; a managed block's prefetch is
/// counted where it was asked for, whatever CUDA answered.
fn moved(api: &str, rc: i32) -> bool {
    rc == 0 || api != "cuMemcpyAsync"
}

/// Replays `trace`'s events (of `pid`, or all) in time order. Events of a
/// device the shim cannot have (outside 0 to 15) are left out.
pub fn replay(trace: &TraceJson, pid: Option<u32>) -> Replay {
    let mut events: Vec<&EventJson> = trace
        .events
        .iter()
        .filter(|e| pid.is_none_or(|p| e.pid == p))
        .filter(|e| e.op == "free" || (0..MAX_DEVICES as i32).contains(&e.device))
        .collect();
    events.sort_by_key(|e| (e.t_ns, e.seq));
    let mut out = Replay {
        start_ns: events.first().map_or(0, |e| e.t_ns),
        end_ns: trace.events.iter().map(|e| e.t_ns).max().unwrap_or(0),
        ..Replay::default()
    };
    let mut held: BTreeMap<(u32, i32), Held> = BTreeMap::new();
    let mut limits = first_limits(trace, &events);
    // Live allocations by (pid, address): their index in `lives`.
    let mut live: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    for event in events {
        let ptr = address(&event.ptr);
        let key = (event.pid, ptr);
        // What changed, on which device: a free or a move is the block's,
        // whatever device its event names.
        let changed = match event.op.as_str() {
            "alloc" if event.rc == 0 => {
                // An address still live means its free was lost (a ring
                // that lapped its reader): that block ends here.
                if let Some(stale) = live.remove(&key) {
                    end(&mut out.lives[stale], event.t_ns, &mut held);
                }
                let placement = event.placement.clone().unwrap_or_else(|| "device".into());
                let totals = held.entry((event.pid, event.device)).or_default();
                add(totals, split(event.size, &placement, event.device_part));
                live.insert(key, out.lives.len());
                out.lives.push(Life {
                    pid: event.pid,
                    device: event.device,
                    ptr,
                    size: event.size,
                    api: event.api.clone(),
                    placement,
                    device_part: event.device_part,
                    head: event.device_part,
                    born_ns: event.t_ns,
                    freed_ns: None,
                    moves: Vec::new(),
                });
                Some(event.device)
            }
            "free" => live
                .remove(&key)
                .map(|index| end(&mut out.lives[index], event.t_ns, &mut held)),
            "promote" | "demote" if moved(&event.api, event.rc) => live.get(&key).map(|&index| {
                let life = &mut out.lives[index];
                let to = if event.op == "promote" {
                    "device"
                } else {
                    "host"
                };
                let totals = held.entry((life.pid, life.device)).or_default();
                sub(totals, life.held());
                life.moves.push((event.t_ns, to.to_string()));
                life.head = 0;
                add(totals, split(life.size, to, 0));
                life.device
            }),
            "quota" | "budget" => {
                let now = limits.entry((event.pid, event.device)).or_default();
                if event.op == "quota" {
                    now.quota = limit(event.size);
                } else {
                    now.budget = limit(event.size);
                }
                held.entry((event.pid, event.device)).or_default();
                Some(event.device)
            }
            _ => None,
        };
        if let Some(device) = changed {
            out.points.push(Point {
                t_ns: event.t_ns,
                pid: event.pid,
                device,
                held: held[&(event.pid, device)],
                limits: limits
                    .get(&(event.pid, device))
                    .copied()
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// The pids with events in `trace` (or `pid`), in order.
pub fn pids(trace: &TraceJson, pid: Option<u32>) -> Vec<u32> {
    let mut pids: Vec<u32> = trace
        .events
        .iter()
        .map(|e| e.pid)
        .filter(|p| pid.is_none_or(|want| *p == want))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Ends `life` at `t_ns`, its bytes out of its process's totals; its device.
fn end(life: &mut Life, t_ns: u64, held: &mut BTreeMap<(u32, i32), Held>) -> i32 {
    life.freed_ns = Some(t_ns);
    sub(
        held.entry((life.pid, life.device)).or_default(),
        life.held(),
    );
    life.device
}

impl Life {
    /// Its bytes on the device and in host memory, where it is now.
    fn held(&self) -> Held {
        split(self.size, current(self), self.head)
    }
}

/// Where a block is now: its latest move's destination, or where it was made.
pub fn current(life: &Life) -> &str {
    life.moves
        .last()
        .map_or(life.placement.as_str(), |(_, to)| to.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, op: &str, ptr: u64, size: u64, placement: &str) -> EventJson {
        EventJson {
            seq,
            t_ns: 1000 * seq,
            pid: 7,
            tid: 7,
            device: 0,
            op: op.into(),
            api: "cudaMalloc".into(),
            ptr: format!("{ptr:#x}"),
            size,
            placement: Some(placement.into()),
            rc: 0,
            device_part: 0,
        }
    }

    #[test]
    fn the_replay_follows_each_block_onto_the_device_and_off_it() {
        let mut spilled = event(2, "alloc", 0x2000, 300, "host");
        spilled.device_part = 100;
        let trace = TraceJson::new(
            Vec::new(),
            vec![
                event(1, "alloc", 0x1000, 500, "device"),
                spilled,
                event(3, "promote", 0x2000, 300, "device"),
                event(4, "demote", 0x2000, 300, "host"),
                event(5, "free", 0x1000, 500, "device"),
                event(6, "free", 0x9999, 1, "device"),
            ],
        );
        let replay = replay(&trace, None);
        let held: Vec<(u64, u64)> = replay
            .points
            .iter()
            .map(|p| (p.held.device_bytes, p.held.spilled_bytes))
            .collect();
        assert_eq!(held, [(500, 0), (600, 200), (800, 0), (500, 300), (0, 300)]);
        assert_eq!(replay.lives.len(), 2);
        assert_eq!(replay.lives[0].freed_ns, Some(5000));
        assert_eq!(current(&replay.lives[1]), "host");
        assert_eq!(replay.start_ns, 1000);
    }

    #[test]
    fn a_lost_free_ends_the_block_and_frees_name_the_blocks_device() {
        let mut other = event(2, "alloc", 0x5000, 50, "device");
        other.device = 1;
        let mut free_other = event(4, "free", 0x5000, 50, "device");
        free_other.device = -1;
        let mut failed = event(5, "promote", 0x1000, 100, "device");
        failed.api = "cuMemcpyAsync".into();
        failed.rc = 2;
        let trace = TraceJson::new(
            Vec::new(),
            vec![
                event(1, "alloc", 0x1000, 100, "host"),
                other,
                // The first block's free was lost; its address comes again.
                event(3, "alloc", 0x1000, 100, "host"),
                free_other,
                failed,
                event(6, "free", 0x1000, 100, "device"),
            ],
        );
        let replay = replay(&trace, None);
        let points: Vec<(i32, u64, u64)> = replay
            .points
            .iter()
            .map(|p| (p.device, p.held.device_bytes, p.held.spilled_bytes))
            .collect();
        assert_eq!(
            points,
            [(0, 0, 100), (1, 50, 0), (0, 0, 100), (1, 0, 0), (0, 0, 0)]
        );
        assert_eq!(replay.lives[0].freed_ns, Some(3000));
        // A quota set live: before it, the one it replaced; after, the new.
        let mut cut = event(2, "quota", 0x2000, 1000, "device");
        cut.api = "vramshare".into();
        let trace = TraceJson::new(
            Vec::new(),
            vec![event(1, "alloc", 0x1000, 100, "device"), cut],
        );
        let quotas: Vec<Option<u64>> = super::replay(&trace, None)
            .points
            .iter()
            .map(|p| p.limits.quota)
            .collect();
        assert_eq!(quotas, [Some(0x2000), Some(1000)]);
        // A device the shim cannot have is left out.
        let mut far = event(7, "alloc", 0x9000, 10, "device");
        far.device = 2_000_000_000;
        let replay = super::replay(&TraceJson::new(Vec::new(), vec![far]), None);
        assert!(replay.lives.is_empty() && replay.points.is_empty());
    }
}
