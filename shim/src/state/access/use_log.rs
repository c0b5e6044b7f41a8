//! Where a trace is written and the job marks its steps: each step's uses
//! of blocks, in order, each with how many events the trace had recorded
//! before it. The trace's allocations and frees and these uses then fall
//! back into one order, the step as the job made it, which
//! `bench/trace-loop` replays without a GPU. The last complete step's log
//! goes into the trace (`access.step_uses`, `docs/trace-format.md`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use vramshare_common::trace_json::StepUsesJson;

use super::replay::Recording;

#[derive(Default)]
struct StepLog {
    /// The step (the marks before it), and the trace's events recorded
    /// when it began and when it ended.
    step: u64,
    began: u64,
    ended: u64,
    /// The blocks each use named (by start), and the events recorded
    /// before each.
    recording: Recording,
    events_before: Vec<u64>,
}

impl StepLog {
    fn push(&mut self, events_before: u64, named: &[usize]) {
        if self.recording.push(named) {
            self.events_before.push(events_before);
        }
    }

    fn json(&self) -> StepUsesJson {
        let uses = (self.events_before.iter().enumerate())
            .map(|(at, &events_before)| {
                let named = (self.recording.named(at).iter())
                    .map(|start| format!("{start:#x}"))
                    .collect();
                (events_before, named)
            })
            .collect();
        StepUsesJson {
            step: self.step,
            events_began: self.began,
            events_ended: self.ended,
            uses,
        }
    }
}

#[derive(Default)]
pub struct UseLog {
    /// The step under way's, and the last complete one's.
    logs: Mutex<(StepLog, Option<StepLog>)>,
    /// Whether a step was marked where a trace is written: uses are logged.
    on: AtomicBool,
}

impl UseLog {
    /// Whether uses are logged.
    pub fn on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// A use naming `named` (blocks by start), after `events_before` events
    /// of the trace.
    pub fn used(&self, events_before: u64, named: &[usize]) {
        if named.is_empty() {
            return;
        }
        if let Ok(mut logs) = self.logs.lock() {
            logs.0.push(events_before, named);
        }
    }

    /// Step `step` begins, after `events` of the trace: the one under way
    /// is the last complete one, unless it overflowed or named nothing.
    pub fn step(&self, step: u64, events: u64) {
        self.on.store(true, Relaxed);
        if let Ok(mut logs) = self.logs.lock() {
            let mut ended = std::mem::take(&mut logs.0);
            ended.ended = events;
            logs.0.step = step;
            logs.0.began = events;
            if ended.recording.complete() {
                logs.1 = Some(ended);
            }
        }
    }

    /// The last complete step's uses, for the trace.
    pub fn json(&self) -> Option<StepUsesJson> {
        let logs = self.logs.lock().ok()?;
        logs.1.as_ref().map(StepLog::json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_complete_step_is_kept_in_order() {
        let log = UseLog::default();
        log.used(3, &[0x10]);
        log.step(1, 4);
        log.used(5, &[0x20, 0x30]);
        log.used(7, &[0x20]);
        assert_eq!(log.json().map(|j| j.step), Some(0), "step 1 is under way");
        log.step(2, 8);
        log.used(9, &[0x40]);
        let json = log.json().expect("step 1 complete");
        assert_eq!(json.step, 1);
        assert_eq!((json.events_began, json.events_ended), (4, 8));
        assert_eq!(
            json.uses,
            vec![
                (5, vec!["0x20".to_string(), "0x30".to_string()]),
                (7, vec!["0x20".to_string()])
            ]
        );
    }

    #[test]
    fn a_step_past_the_bound_is_not_kept() {
        let log = UseLog::default();
        log.step(1, 0);
        log.used(1, &[0x10]);
        log.step(2, 1);
        let big = vec![0x20usize; super::super::replay::MAX_RECORDED + 1];
        log.used(2, &big);
        log.step(3, 2);
        assert_eq!(log.json().map(|j| j.step), Some(1), "step 2 overflowed");
    }
}
