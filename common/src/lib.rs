//! What the vramshare shim (writer) and the `vramshare` command (reader)
//! share, so that the two cannot drift apart:
//! - [`event`]: the trace's vocabulary and the fixed-size event;
//! - [`trace_json`]: the `vramshare-trace/1` JSON;
//! - [`size`]: sizes and quotas as people write them;
//! - [`settings`]: the names of spill modes, priorities and log levels;
//! - [`files`], [`mapped`], [`ring`], [`registry`], [`pool`]: the shared-memory files,
//!   and [`fault_guard`], which keeps one cut short from killing a process;
//! - [`process`]: process identity and the shared clock.

pub mod event;
pub mod fault_guard;
pub mod files;
pub mod mapped;
pub mod pci;
pub mod pool;
pub mod process;
pub mod registry;
pub mod ring;
pub mod settings;
pub mod size;
pub mod trace_json;
