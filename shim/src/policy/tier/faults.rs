//! A launch, copy or library call that fails as a kernel's fault does (an
//! illegal address, a failed launch; cuBLAS's or cuDNN's execution failed)
//! while the spill tier holds blocks is said once, with where the call's
//! blocks were and the tier's last moves: a kernel that met a block in the
//! middle of a move would fail so, and the message shows which blocks were
//! moving then. The job's own faults get the same message; it says what
//! the tier was doing, and how to run without moves beside the kernels.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use vramshare_common::event::Api;

use crate::state::tier::{RecentMove, RECENT_MOVES};
use crate::state::{lock, State};

/// The error codes of a kernel's fault, the same in the runtime and the
/// driver: illegal address, launch timeout, hardware stack error, illegal
/// instruction, misaligned address, invalid address space, invalid
/// program counter, launch failure, unknown.
const FAULTS: [c_int; 9] = [700, 702, 714, 715, 716, 717, 718, 719, 999];

/// `CUBLAS_STATUS_EXECUTION_FAILED`; cuDNN 8's `CUDNN_STATUS_EXECUTION_FAILED`
/// and cuDNN 9's family of them (5000 and its subcodes).
const CUBLAS_EXECUTION_FAILED: c_int = 13;
const CUDNN8_EXECUTION_FAILED: c_int = 8;
const CUDNN9_EXECUTION_FAILED: std::ops::Range<c_int> = 5000..6000;

static SAID: AtomicBool = AtomicBool::new(false);

/// After a move of the block at `ptr` (`size` bytes) landed.
pub fn moved(state: &State, ptr: usize, size: u64, to_device: bool) {
    let mut recent = lock(&state.tier.recent_moves);
    if recent.len() == RECENT_MOVES {
        recent.pop_front();
    }
    let at = std::time::Instant::now();
    recent.push_back(RecentMove {
        ptr,
        size,
        to_device,
        at,
    });
}

/// After `api` returned `rc`, having named the tier's blocks `named`.
#[inline]
pub fn returned(state: &State, api: Api, rc: c_int, named: &[usize]) {
    if rc != 0 {
        failed(state, api, rc, named);
    }
}

/// [`returned`] for a call that failed: out of line, so that a call that
/// succeeded skips its code.
#[inline(never)]
fn failed(state: &State, api: Api, rc: c_int, named: &[usize]) {
    if !state.tier.active.load(Relaxed) || !is_fault(api, rc) {
        return;
    }
    if SAID.swap(true, Relaxed) {
        return;
    }
    let named = describe_named(state, named);
    let moves = describe_moves(&lock(&state.tier.recent_moves));
    error!(
        "{} failed with error {rc}, as a kernel's fault does, while the spill tier held blocks. \
         Blocks it named: {named}. The tier's last moves, newest first: {moves}. If the job does not \
         fail so without vramshare, run it with VRAMSHARE_MOVES=on (every move waits for the \
         device to finish its work) and report this message",
        api.name()
    );
}

fn is_fault(api: Api, rc: c_int) -> bool {
    let name = api.name();
    if name.starts_with("cublas") {
        rc == CUBLAS_EXECUTION_FAILED
    } else if name.starts_with("cudnn") {
        rc == CUDNN8_EXECUTION_FAILED || CUDNN9_EXECUTION_FAILED.contains(&rc)
    } else {
        FAULTS.contains(&rc)
    }
}

/// Where each of the call's blocks was (the first eight).
fn describe_named(state: &State, named: &[usize]) -> String {
    if named.is_empty() && super::quiet::quiet(state) {
        // Uses go unrecorded while nothing can move.
        return "not recorded (no block had moved for thousands of uses, none was in host memory)"
            .into();
    }
    if named.is_empty() {
        // After a fault CUDA may refuse the queries that read a launch's
        // arguments.
        return "none that could be read".into();
    }
    let said: Vec<String> = named
        .iter()
        .take(8)
        .map(|ptr| {
            let at = match state.tier.blocks.get(ptr) {
                Some(b) if b.on_device != 0 => "on the device",
                Some(_) => "in host memory",
                None => "gone",
            };
            let moving = if state.ledger.block_at(*ptr).is_some_and(|b| b.moving) {
                ", moving"
            } else {
                ""
            };
            format!("{ptr:#x} {at}{moving}")
        })
        .collect();
    said.join(", ")
}

fn describe_moves(recent: &std::collections::VecDeque<RecentMove>) -> String {
    if recent.is_empty() {
        return "none".into();
    }
    let now = std::time::Instant::now();
    let said: Vec<String> = recent
        .iter()
        .rev()
        .map(|m| {
            let to = if m.to_device { "in" } else { "out" };
            let ago = now.duration_since(m.at).as_secs_f64() * 1e3;
            format!("{:#x} ({} bytes) {to} {ago:.1} ms ago", m.ptr, m.size)
        })
        .collect();
    said.join("; ")
}
