//! The CUDA layer, below everything else in the shim: the list of functions
//! it knows ([`functions`]), their real twins ([`real`]), and the calls the
//! shim makes on its own account ([`backend`]: device queries, managed
//! memory, the advise and prefetch forms of CUDA 12 and 13, its streams),
//! and what the hooks around them cost the job's threads ([`host_costs`]).

pub mod backend;
pub mod costs_by_name;
#[cfg(all(target_arch = "x86_64", not(test)))]
pub mod dlsym;
pub mod functions;
pub mod host_costs;
pub mod real;
