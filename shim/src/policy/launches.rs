//! Kernel launches, through every path a job takes (the runtime's calls and
//! host stubs, the driver's, graphs): each is counted in the process's
//! registry slot and goes to CUDA unchanged.

use cudart_sys::cudaError_t;
use vramshare_common::event::Api;

use crate::state::state;

/// A launch through `api`: counted, then made by `real`.
pub fn launch(api: Api, real: impl FnOnce() -> cudaError_t) -> cudaError_t {
    state().count_launch(api);
    real()
}
