//! Property tests of what vramshare reads from people and from other
//! processes: sizes and quotas, trace JSON, and the shared files (registry,
//! pool table, trace ring) with arbitrary contents, header and counters
//! included. Whatever the input, nothing panics (overflow checks are on in
//! these debug builds), loops forever, or hands back a slot out of range.
//!
//! The cases per property are kept low enough for the whole set to run in
//! well under a minute on two cores in debug mode; the fuzz targets in
//! `fuzz/` go further.

#[path = "properties/buffer.rs"]
mod buffer;
#[path = "properties/pools.rs"]
mod pools;
#[path = "properties/registry.rs"]
mod registry;
#[path = "properties/ring.rs"]
mod ring;
#[path = "properties/size.rs"]
mod size;
#[path = "properties/trace.rs"]
mod trace;
