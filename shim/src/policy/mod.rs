//! The decisions: whether an allocation fits the quota, where it goes when it
//! does not, what `cudaMemGetInfo` answers, and when spilled blocks come back.
//! Below the exports, above the state: each hooked function's handler
//! ([`handlers`]) hands its call to one of these.

mod adapters;
mod allocate;
pub mod blas_workspaces;
mod graph_nodes;
pub mod handlers;
mod launches;
pub mod library_streams;
mod moves;
mod pool_room;
pub mod pool_stats;
mod quota;
pub mod stream_pools;
mod tier;
mod variant_packs;
mod vmm;

pub use adapters::{free, malloc, malloc_3d, malloc_managed, malloc_pitch, malloc_pooled};
pub use graph_nodes::blocks_of_nodes;
pub use launches::{copy_call, launch, library_call};
pub use moves::{demote_for, demote_to_quota, pool_room, promote, promote_leaving};
pub use quota::mem_get_info;
pub use tier::copier::forget_after_fork as forget_copiers_after_fork;
pub use tier::grouped::step as step_marked;
pub use tier::ipc_refused;
pub use tier::uses::unknown_call;
pub use vmm::{mem_create, mem_map, mem_release, mem_unmap};
