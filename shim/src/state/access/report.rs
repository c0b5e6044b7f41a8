//! The access profile as the exit trace carries it (`access` of a process,
//! `docs/trace-format.md`).

use vramshare_common::event::Placement;
use vramshare_common::trace_json::{AccessJson, BlockAccessJson, StepBytesJson, StepUseJson};

use super::profile::{BlockProfile, VIA_COPY, VIA_KERNEL, VIA_LIBRARY};
use crate::state::State;

/// The profile of every block, with the latest complete step's bytes;
/// `None` if nothing was launched.
pub fn access_json(state: &State) -> Option<AccessJson> {
    let access = &state.access;
    if !access.steps.any() {
        return None;
    }
    let profiles = access.index.profiles();
    // Steps are shown from the one the step was found at (earlier ones were
    // guesses); the step under way at exit is not complete.
    let (current, found) = (access.steps.current(), access.steps.found_at());
    let last = (found > 0 && current > found).then(|| current - 1);
    let last_step = last.map(|step| step_bytes(&profiles, step));
    let (functions, described) = access.functions.described();
    let blocks: Vec<BlockAccessJson> = profiles
        .iter()
        .map(|profile| block_json(state, profile, last, (found, current)))
        .collect();
    let uses = blocks.iter().map(|b| b.uses).sum();
    let uses_in_host = blocks.iter().map(|b| b.uses_in_host).sum();
    Some(AccessJson {
        steps: access.steps.steps(),
        marked: access.steps.marked(),
        step_launches: access.steps.period(),
        last_step,
        functions: functions as u64,
        functions_described: described as u64,
        uses,
        uses_in_host,
        blocks,
        blocks_forgotten: access
            .index
            .forgotten
            .load(std::sync::atomic::Ordering::Relaxed),
        index_rebuilds: access
            .index
            .rebuilds
            .load(std::sync::atomic::Ordering::Relaxed),
        index_rebuild_seconds: access
            .index
            .rebuild_ns
            .load(std::sync::atomic::Ordering::Relaxed) as f64
            / 1e9,
        step_uses: access.use_log.json(),
    })
}

fn step_bytes(profiles: &[std::sync::Arc<BlockProfile>], step: u64) -> StepBytesJson {
    let mut bytes = StepBytesJson {
        step,
        ..StepBytesJson::default()
    };
    for profile in profiles.iter().filter(|p| p.lived_through(step)) {
        bytes.live_bytes = bytes.live_bytes.saturating_add(profile.size);
        if let Some(used) = profile.in_step(step) {
            bytes.touched_bytes = bytes.touched_bytes.saturating_add(profile.size);
            if used.via & VIA_KERNEL != 0 {
                bytes.touched_by_kernels = bytes.touched_by_kernels.saturating_add(profile.size);
            }
            if used.via & VIA_LIBRARY != 0 {
                bytes.touched_by_libraries =
                    bytes.touched_by_libraries.saturating_add(profile.size);
            }
            if used.via & VIA_COPY != 0 {
                bytes.touched_by_copies = bytes.touched_by_copies.saturating_add(profile.size);
            }
        }
    }
    bytes
}

/// A block's profile; `(found, current)`: the first step shown, and the one
/// under way.
fn block_json(
    state: &State,
    profile: &BlockProfile,
    last: Option<u64>,
    (found, current): (u64, u64),
) -> BlockAccessJson {
    let alive = if found == 0 {
        0
    } else {
        profile.steps_alive(found, current)
    };
    let placement = match profile.freed() {
        Some(_) => "freed".to_string(),
        None => state
            .ledger
            .placement_at(profile.start)
            .unwrap_or(Placement::Unknown)
            .name()
            .to_string(),
    };
    let mut via = Vec::new();
    if profile.via() & VIA_KERNEL != 0 {
        via.push("kernel".to_string());
    }
    if profile.via() & VIA_LIBRARY != 0 {
        via.push("library".to_string());
    }
    if profile.via() & VIA_COPY != 0 {
        via.push("copy".to_string());
    }
    BlockAccessJson {
        ptr: format!("{:#x}", profile.start),
        size: profile.size,
        device: profile.device,
        placement,
        uses: profile.uses(),
        uses_in_host: profile.uses_in_host(),
        // Uses in the guessed steps before are not told apart: at most the
        // steps it lived through since.
        steps_used: profile.steps_used().min(alive),
        steps_alive: alive,
        last_step: last
            .and_then(|step| profile.in_step(step))
            .map(|used| StepUseJson {
                uses: used.uses,
                first: used.first,
                last: used.last,
            }),
        stream: format!("{:#x}", profile.stream()),
        via,
    }
}
