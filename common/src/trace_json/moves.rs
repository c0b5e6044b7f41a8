//! The trace's `moves`: what the spill tier moved, its counters over time,
//! and what the shim's hooks cost the job's threads.

use serde::{Deserialize, Serialize};

/// What the spill tier moved between device and host memory.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct MovesJson {
    /// Blocks moved, each way, and their bytes.
    pub to_device: u64,
    pub to_host: u64,
    pub bytes_to_device: u64,
    pub bytes_to_host: u64,
    /// Times a move found the block had come in already this step and
    /// left it in host memory, read in place.
    pub left_in_place: u64,
    /// Uses that read a block in place, not brought in, because it had
    /// served one use on the device before it went out (and this use reads
    /// it about once). A trace written before this was counted has none.
    #[serde(default)]
    pub read_once_in_place: u64,
    /// Time spent copying and remapping, while the job's launches were
    /// held back and the device had nothing else to do.
    pub seconds: f64,
    /// Time the moves first waited for the device to finish the job's
    /// work (the job's own compute, with no new work queued behind it).
    pub drain_seconds: f64,
    /// Of `seconds`: waiting for the copies, remapping ranges, and making
    /// and giving back physical memory (the rest is the shim's own work).
    pub copy_seconds: f64,
    pub remap_seconds: f64,
    pub memory_seconds: f64,
    /// Of all the tier's time (moves and allocations): making new host
    /// memory, which pins it, and its bytes.
    pub pinning_seconds: f64,
    pub pinned_bytes: u64,
    /// Host memory given back to the machine while live blocks remained,
    /// for want of room among the spares.
    pub unpinned_bytes: u64,
    /// Of `pinned_bytes`: made while at least as many bytes of host memory
    /// lay unused that could not serve the block (of another size, or a
    /// kept block's whose free was not reached). A trace written before
    /// this was counted has none.
    #[serde(default)]
    pub pinned_beside_unused_bytes: u64,
    /// Groups of a step's allocations made as one block each, and the
    /// allocations placed in them after each group's first. A trace
    /// written before groups were made has none.
    #[serde(default)]
    pub groups_made: u64,
    #[serde(default)]
    pub grouped_members: u64,
    /// Of `bytes_to_device`: blocks no work had touched since they were
    /// handed out, whose bytes were not yet the job's.
    pub fresh_bytes_to_device: u64,
    /// Of `bytes_to_device`: blocks brought into the device memory of
    /// blocks freed in stream order whose frees were not reached yet, their
    /// copies queued behind those frees (no block moved out for the room).
    #[serde(default)]
    pub lent_bytes_to_device: u64,
    /// Where moves overlap the job's kernels: new blocks made on the device
    /// by moving others out, where they would have been made in host
    /// memory (not a part of `bytes_to_device`: nothing was copied).
    pub made_with_room_bytes: u64,
    /// Where the job marks its steps and moves overlap: bytes handed to
    /// the mover thread before the point of the step where the step
    /// before's live blocks required the most out of the device, as soon as
    /// nothing used them, because their next use lies past that point.
    /// Work that names one of them before its move begins claims it back,
    /// and it does not go; the rest are a part of `bytes_to_host`. A trace
    /// written before these were counted has none.
    #[serde(default)]
    pub out_before_peak_bytes: u64,
    /// Bytes chosen to go out to make the room kept free for moves again,
    /// after a use or an allocation (handed to the mover thread or moved at
    /// once), and bytes chosen for the room a block a use named, or a new
    /// block, needed at once: with `out_before_peak_bytes`, why blocks went
    /// out (a move claimed back or failed counts but never went). A trace
    /// written before these were counted has none.
    #[serde(default)]
    pub out_kept_free_bytes: u64,
    #[serde(default)]
    pub out_for_room_bytes: u64,
    /// Rounds of moves: for work that named blocks in host memory, for
    /// blocks brought ahead of need, for a new block that needed room, or
    /// for a quota or budget cut; with the device drained first, or, where
    /// moves overlap the job's kernels, beside them.
    pub fetches: u64,
    /// Of `fetches`: times the device was drained first; `None` in a trace
    /// written before they were counted.
    #[serde(default)]
    pub drains: Option<u64>,
    /// Where moves overlap the job's kernels, moves that drained the device
    /// all the same: after a launch the shim could not read, and for want
    /// of room that blocks whose uses are known could make.
    #[serde(default)]
    pub drains_unread: u64,
    #[serde(default)]
    pub drains_for_room: u64,
    /// Where moves overlap the job's kernels: the times the tier went
    /// quiet (no moves for thousands of uses, none that could come), the
    /// uses let through unrecorded meanwhile, and the moves that drained
    /// the device to end a quiet spell.
    #[serde(default)]
    pub quiet_entered: u64,
    #[serde(default)]
    pub unrecorded_uses: u64,
    #[serde(default)]
    pub drains_quiet: u64,
    /// Where moves overlap the job's kernels: moves to the host made on the
    /// shim's mover thread (not a part of `to_host`'s time above, which is
    /// the job's threads'), the time it spent on them, and moves claimed
    /// back before they began, by work that named their block.
    pub mover_moves: u64,
    pub mover_seconds: f64,
    pub mover_claimed: u64,
    /// Of `mover_seconds`: waiting for its copies to land, remapping
    /// ranges, and making and releasing physical memory.
    pub mover_copy_seconds: f64,
    pub mover_remap_seconds: f64,
    pub mover_memory_seconds: f64,
    /// Time the job's threads waited for the mover's moves under way that
    /// their work claimed back.
    pub mover_claim_wait_seconds: f64,
    /// Time the job's threads waited for the mover's moves under way to
    /// land, for the room they free.
    pub mover_room_wait_seconds: f64,
    /// The copier threads' time with a copy out under way (from taking it
    /// to its last piece landed), and of it the time in the calls that
    /// queue each piece on the copy stream. A trace written before these
    /// were counted has none.
    #[serde(default)]
    pub copier_seconds: f64,
    #[serde(default)]
    pub copier_queue_seconds: f64,
    /// Time allocations waited for kept blocks' stream-ordered frees to be
    /// reached, to give their room back.
    pub free_wait_seconds: f64,
    /// Where the job marks its steps and moves overlap: moves onto the
    /// device ahead of need, as the step before's record named the block
    /// among the next uses (a part of `to_device`), and their bytes; and
    /// the uses that named first the block the record had its use at that
    /// place name first, and those that did not (how well the step before
    /// foretold this one); of those that did not, the uses whose first
    /// block the step before never named.
    pub ahead_moves: u64,
    pub ahead_bytes: u64,
    pub replay_matched: u64,
    pub replay_missed: u64,
    pub replay_unseen: u64,
    /// The first uses of the last complete step (at most 16) that did not
    /// name first what the step before had named first at their place.
    pub replay_misses: Vec<ReplayMiss>,
    /// Steps begun while the process ran (0: none found).
    pub steps: u64,
    /// Where the job marks its steps and moves overlap: the last steps
    /// that ended (at most 64), oldest first, each with its uses and the
    /// most bytes its live blocks required out of the device at once (where
    /// the next step aims the blocks it sends out before the peak), first
    /// reached at use `at`. A trace written before these were kept has none.
    #[serde(default)]
    pub step_peaks: Vec<StepPeakJson>,
    /// The counters over time, so that a part of the run (its timed steps,
    /// without the warm-up) can be told apart: taken every 50 ms or more,
    /// at most [`MOVES_SAMPLES_MAX`] spread over the whole run, then one at
    /// the run's end.
    pub samples: Vec<MovesSample>,
    /// The job's threads' time in the shim's hooks by hook (each call less
    /// the CUDA call it passes on), and in the CUDA calls the hooks made
    /// of their own by function, once the tier had blocks; the costliest
    /// first. Over the whole run, and over the last complete step the job
    /// marked.
    pub host_calls: Vec<HostCallJson>,
    pub host_calls_last_step: Vec<HostCallJson>,
}

/// A use that the step before did not foretell: its place in its step,
/// what the step before named first at the place the record had reached
/// (none past its end; the record follows a job whose uses came early or
/// late, so that place may differ from the use's own) and what this one
/// named first (a block as the so-manieth allocation of its
/// step or of the step before, or an older block by its start), and how
/// many uses from that place the step before had a use naming that block
/// first (none within 16 uses either way).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct ReplayMiss {
    pub at: u64,
    pub expected: Option<String>,
    pub named: String,
    pub found_at: Option<i64>,
}

/// A step that ended, as [`MovesJson::step_peaks`] holds it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct StepPeakJson {
    pub uses: u64,
    pub out_needed_bytes: u64,
    pub at: u64,
}

/// Calls of one name, `kind` "hook" (a hook's own time) or "cuda" (the
/// shim's own CUDA calls of that function): every call, and their time
/// (estimated where not every call was timed).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct HostCallJson {
    pub name: String,
    pub kind: String,
    pub calls: u64,
    /// Of `calls`, those timed: `seconds` is estimated from them where
    /// fewer.
    pub timed_calls: u64,
    pub seconds: f64,
}

/// The most samples of the moves' counters a trace holds.
pub const MOVES_SAMPLES_MAX: usize = 4096;

/// The tier's counters at one moment (`t_ns`, `CLOCK_MONOTONIC`, as
/// Python's `time.monotonic_ns()` reads it), times in nanoseconds.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct MovesSample {
    pub t_ns: u64,
    pub bytes_to_device: u64,
    pub bytes_to_host: u64,
    pub move_ns: u64,
    pub drain_ns: u64,
    pub copy_ns: u64,
    pub remap_ns: u64,
    /// Of `remap_ns`: the remaps that end moves to the host.
    pub remap_to_host_ns: u64,
    pub memory_ns: u64,
    /// Of `memory_ns`: making device memory for blocks coming in, and
    /// releasing what blocks going out leave.
    pub device_create_ns: u64,
    pub device_release_ns: u64,
    /// Queuing moves' copies and their events (part of the moves' time
    /// that is none of the above).
    pub queue_ns: u64,
    /// Choosing blocks to move out, inside moves and before them (not a
    /// part of `move_ns`).
    pub choose_ns: u64,
    /// Giving kept blocks' device memory back, inside moves, at
    /// allocations and at quota cuts (not a part of `move_ns`).
    pub give_back_ns: u64,
    /// Of `give_back_ns`: for the room kept free ahead of need, not for a
    /// block or an allocation that needs room now.
    pub give_back_ahead_ns: u64,
    /// Mapping memory at a kept block's empty range as it is handed out
    /// again, at allocations (not a part of `move_ns`).
    pub hand_out_ns: u64,
    /// Making new blocks at allocations where no kept block of the size
    /// served (an address range, physical memory, its mappings), and how
    /// many (not a part of `move_ns`).
    pub place_ns: u64,
    pub placed: u64,
    /// The job's threads ordering work after blocks' uses and recording
    /// their events, around each call that names tier blocks (not a part
    /// of `move_ns`).
    pub uses_ns: u64,
    /// Of `uses_ns`: waiting on the host for the last uses of a call's
    /// blocks, where the call's stream is not known (a library call whose
    /// handle's stream was not seen set).
    pub uses_wait_ns: u64,
    pub pinning_ns: u64,
    pub fetches: u64,
    #[serde(default)]
    pub drains: u64,
    /// The mover thread's time making moves (not a part of `move_ns`), and
    /// of it: waiting for copies, remapping, making and releasing memory.
    pub mover_ns: u64,
    pub mover_copy_ns: u64,
    pub mover_remap_ns: u64,
    pub mover_memory_ns: u64,
    /// The job's threads waiting for moves under way that they claimed.
    pub mover_claim_wait_ns: u64,
    /// The job's threads waiting for the mover's moves to land, for room.
    pub mover_room_wait_ns: u64,
    /// The copier threads with a copy out under way, and of it in the
    /// calls that queue its pieces.
    #[serde(default)]
    pub copier_busy_ns: u64,
    #[serde(default)]
    pub copier_queue_ns: u64,
    /// Allocations waiting for kept blocks' frees to be reached.
    pub free_wait_ns: u64,
    /// Of `bytes_to_device`: brought ahead of need.
    pub ahead_bytes: u64,
    /// Why blocks did or did not come ahead: looks at the uses to come
    /// made while blocks were in host memory; of them, those that found no
    /// block there that could come; blocks passed over as queued work still
    /// read them in place; looks that stopped at a block for want of room.
    pub ahead_looks: u64,
    pub ahead_none_in_host: u64,
    pub ahead_passed_busy: u64,
    pub ahead_short_of_room: u64,
    /// Bytes of kept blocks (freed, kept for reuse) on the device at the
    /// sample: room counted under the quota that no live block holds.
    pub kept_on_device_bytes: u64,
    /// New blocks made on the device by moving others out.
    pub made_with_room_bytes: u64,
    /// Handed to the mover before the step's peak (those not claimed back
    /// a part of `bytes_to_host`).
    #[serde(default)]
    pub out_before_peak_bytes: u64,
    /// Chosen to go out to make the room kept free again, and for room
    /// needed at once (`out_kept_free_bytes` and `out_for_room_bytes` so
    /// far).
    #[serde(default)]
    pub out_kept_free_bytes: u64,
    #[serde(default)]
    pub out_for_room_bytes: u64,
    /// `pinned_beside_unused_bytes` so far.
    #[serde(default)]
    pub pinned_beside_unused_bytes: u64,
    /// Uses the step before foretold and those it did not (the totals of
    /// `replay_matched` and `replay_missed` so far).
    pub replay_matched: u64,
    pub replay_missed: u64,
    /// Uses that read their block in host memory because it had come onto
    /// the device once in the step already (`left_in_place` so far).
    pub left_in_place: u64,
    /// The mover thread's moves made, and those claimed back before they
    /// began by work that named their block (`mover_moves` and
    /// `mover_claimed` so far).
    pub mover_moves: u64,
    pub mover_claimed: u64,
    /// The job's threads in the shim's hooks (once the tier had blocks):
    /// kernel launches counted, their time in the shim (estimated from one
    /// launch in eight, timed at random; each call less the
    /// CUDA call passed on), and of it the shim's own CUDA calls (time and
    /// number), reading parameters, moving the blocks named, and bringing
    /// blocks ahead; then every other hooked call alike.
    pub launch_hooks: u64,
    pub launch_hooks_ns: u64,
    pub launch_hooks_cuda_ns: u64,
    pub launch_hooks_cuda_calls: u64,
    pub launch_read_ns: u64,
    pub launch_fetch_ns: u64,
    pub launch_ahead_ns: u64,
    pub other_hooks: u64,
    pub other_hooks_ns: u64,
    pub other_hooks_cuda_ns: u64,
    pub other_hooks_cuda_calls: u64,
}
