//! What the access tests read of a run (tests include it with
//! `#[path = "common/access.rs"] mod access_of;` beside `mod common;`).
#![allow(dead_code)]

use serde_json::Value;

use crate::common::Run;

/// The exit trace's `access` of the only process.
pub fn access(run: &Run) -> &Value {
    &run.trace()["processes"][0]["access"]
}

/// A block's profile, by the address the client printed for it.
pub fn block<'a>(run: &'a Run, name: &str, step: &str) -> &'a Value {
    let ptr = run.field(step, "ptr");
    access(run)["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["ptr"] == ptr.as_str())
        .unwrap_or_else(|| panic!("no profile of {name} ({ptr}): {}", access(run)))
}

pub fn uses(run: &Run, name: &str) -> u64 {
    block(run, name, &format!("malloc {name}"))["uses"]
        .as_u64()
        .unwrap()
}

pub fn coverage(run: &Run, api: &str) -> [u64; 4] {
    let c = &run.trace()["processes"][0]["coverage"][api];
    ["named", "unnamed", "undecoded", "in_library"].map(|k| c[k].as_u64().unwrap_or(0))
}

pub const BLOCKS: [&str; 4] = [
    "malloc:src:1M",
    "malloc:dst:1M",
    "malloc:extra:64K",
    "malloc:idle:1M",
];
