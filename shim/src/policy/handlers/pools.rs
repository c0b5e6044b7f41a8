//! A stream-ordered pool's statistics: CUDA's, with the spill tier's blocks
//! that serve the pool's allocations ([`crate::policy::pool_stats`]).

use std::ffi::{c_int, c_void};

use cudart_sys::*;

use crate::cuda::real;
use crate::policy::pool_stats;
use vramshare_common::event::Api;

pub unsafe fn cudaMemPoolGetAttribute(
    pool: cudaMemPool_t,
    attribute: c_int,
    value: *mut c_void,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        pool_stats::get_attribute(
            Api::cudaMemPoolGetAttribute,
            pool.cast(),
            attribute,
            value,
            || real::cudaMemPoolGetAttribute(pool, attribute, value),
        )
    }
}

pub unsafe fn cudaMemPoolSetAttribute(
    pool: cudaMemPool_t,
    attribute: c_int,
    value: *mut c_void,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        pool_stats::set_attribute(
            Api::cudaMemPoolSetAttribute,
            pool.cast(),
            attribute,
            value,
            || real::cudaMemPoolSetAttribute(pool, attribute, value),
        )
    }
}

pub unsafe fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attribute: c_int,
    value: *mut c_void,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        pool_stats::get_attribute(
            Api::cuMemPoolGetAttribute,
            pool.cast(),
            attribute,
            value,
            || real::cuMemPoolGetAttribute(pool, attribute, value),
        )
    }
}

pub unsafe fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attribute: c_int,
    value: *mut c_void,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        pool_stats::set_attribute(
            Api::cuMemPoolSetAttribute,
            pool.cast(),
            attribute,
            value,
            || real::cuMemPoolSetAttribute(pool, attribute, value),
        )
    }
}
