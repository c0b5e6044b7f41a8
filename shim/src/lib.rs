//! libvramshare.so: put in front of an unchanged CUDA job with `LD_PRELOAD`,
//! it holds the process to a per-device memory quota (`VRAMSHARE_QUOTA`),
//! places what exceeds it in managed memory that lives on the host, brings it
//! back when room frees up, and traces every allocation.
//!
//! Layers, from the C boundary inwards; a module uses only those below it
//! (ARCHITECTURE.md has the picture, and how to add a hook):
//! - [`exports`]: the exported hooks, made from the one list of
//!   [`cuda::functions`], the guard around each, and the lookups by name;
//! - [`lifecycle`]: loading, the first calls, `fork` and exit;
//! - [`watcher`]: the shim's thread, for quotas changed while the job runs;
//! - [`policy`]: the decisions, one file per subject, and each hook's handler;
//! - [`state`]: the process's state, its ledger, trace, shared files and
//!   the JSON written at exit;
//! - [`cuda`]: the list of CUDA functions, their real twins, and the calls
//!   the shim makes on its own account;
//! - [`config`], [`log`]: the variables, and stderr.

#[macro_use]
mod log;
pub mod config;
mod cuda;
pub mod exports;
mod lifecycle;
mod policy;
mod state;
mod watcher;
