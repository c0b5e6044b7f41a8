//! cuBLAS's kernels may use the workspace set on their handle
//! (`cublasSetWorkspace_v2`; PyTorch sets one on each handle it hands out):
//! a split-K product sums there before it writes its output. No operand of
//! the product's call shows it, so each handle's workspace is recorded as
//! it is set and named beside every product made through the handle;
//! otherwise its block could move while a product's kernel writes in it.
//!
//! A handle whose workspace is set back to none, or reset by
//! `cublasSetStream_v2` to cuBLAS's own (allocated inside cuBLAS and never
//! named by anyone, so moved only once the device is idle), may keep its
//! old record: naming a block a product does not use costs a move at
//! worst, never a byte.

use std::ffi::c_void;

use crate::state::{lock, State};

/// After `cublasSetWorkspace_v2(handle, workspace, size)` succeeded.
pub fn set(state: &State, handle: *mut c_void, workspace: *mut c_void, size: usize) {
    let mut workspaces = lock(&state.blas_workspaces);
    let handle = handle as usize;
    let was = if workspace.is_null() || size == 0 {
        workspaces.remove(&handle)
    } else {
        workspaces.insert(handle, workspace as usize)
    };
    // PyTorch sets the workspace each time it hands a handle out: said
    // only when it changes.
    if was != Some(workspace as usize) {
        debug!("cuBLAS handle {handle:#x}: workspace {workspace:p}, {size} bytes");
    }
}

/// Before `handle` is destroyed: a handle made later at its address has
/// no workspace of the job's until one is set.
pub fn forget(state: &State, handle: *mut c_void) {
    lock(&state.blas_workspaces).remove(&(handle as usize));
}

/// The workspace set on `handle` (null where none was).
pub fn of(state: &State, handle: *mut c_void) -> *const c_void {
    let workspaces = lock(&state.blas_workspaces);
    workspaces.get(&(handle as usize)).copied().unwrap_or(0) as *const c_void
}
