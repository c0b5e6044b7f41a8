//! Each allocation API's shape turned into one request of the core
//! ([`super::allocate`]): the pointer-only allocations, pitched ones, and
//! the frees.

use std::ffi::{c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::{Api, Op, Placement};

use crate::cuda::backend::Backend;
use crate::cuda::real;
use crate::state::ledger::Taken;
use crate::state::state;

use super::allocate::{allocate, Request};
use super::moves::promote;
use super::quota::device_quota;
use super::stream_pools;
use super::tier::grouped::Member;

/// `cudaMalloc` and `cuMemAlloc_v2`.
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    // SAFETY: `out` is the caller's, as CUDA would receive it.
    unsafe { allocate_into(api, out, size, None, real_alloc, cudaMemAttachGlobal, false) }
}

/// `cudaMallocAsync`, `cudaMallocFromPoolAsync`, their driver twins and
/// `_ptsz` forms: allocations from a stream-ordered pool (`pool` null for
/// the device's current one), whose reserve counts as well ([`stream_pools`]).
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_pooled(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    pool: *mut c_void,
    stream: *mut c_void,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    let ordered = Ordered {
        pool,
        stream: stream as usize,
    };
    // SAFETY: `out` is the caller's, as CUDA would receive it.
    unsafe {
        allocate_into(
            api,
            out,
            size,
            Some(ordered),
            real_alloc,
            cudaMemAttachGlobal,
            false,
        )
    }
}

/// A stream-ordered allocation's pool (null: the device's current one) and
/// stream.
struct Ordered {
    pool: *mut c_void,
    stream: usize,
}

/// `cudaMallocManaged` and `cuMemAllocManaged`: the caller's own managed
/// memory counts against the quota while it fits; beyond, it is advised to
/// live on the host (spill mode or not: managed memory may live there by
/// nature).
///
/// # Safety
/// `out` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_managed(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
) -> cudaError_t {
    // SAFETY: `out` is the caller's, as CUDA would receive it.
    unsafe { allocate_into(api, out, size, None, real_alloc, flags, true) }
}

/// An allocation whose only output is the pointer written to `out`.
unsafe fn allocate_into(
    api: Api,
    out: *mut *mut c_void,
    size: usize,
    ordered: Option<Ordered>,
    real_alloc: impl FnOnce(*mut *mut c_void) -> cudaError_t,
    managed_flags: c_uint,
    always_spill: bool,
) -> cudaError_t {
    if out.is_null() {
        return real_alloc(out);
    }
    allocate(Request {
        api,
        size: size as u64,
        pool: ordered.as_ref().map(|o| o.pool),
        stream: ordered.as_ref().map(|o| o.stream),
        on_device: || {
            let rc = real_alloc(out);
            let ptr = if rc == cudaSuccess {
                // SAFETY: CUDA has written the caller's `out`, which is not null.
                unsafe { *out }
            } else {
                std::ptr::null_mut()
            };
            (rc, ptr, size as u64)
        },
        // SAFETY: `out` is the caller's pointer, not null.
        on_host: |ptr| unsafe { *out = ptr },
        managed_flags,
        always_spill,
    })
}

/// The pitch CUDA picks for a row of `width` bytes, for reserving before the
/// call; corrected from the real pitch after it.
const PITCH_ALIGN: usize = 512;

fn estimated_pitch(width: usize) -> Option<usize> {
    width.checked_next_multiple_of(PITCH_ALIGN)
}

/// # Safety
/// The pointers are the caller's, as CUDA would receive them.
pub unsafe fn malloc_pitch(
    api: Api,
    out: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
    real_pitch: impl Fn() -> cudaError_t,
) -> cudaError_t {
    let estimate = estimated_pitch(width).and_then(|p| Some((p, p.checked_mul(height)?)));
    let (Some((est_pitch, size)), false, false) = (estimate, out.is_null(), pitch.is_null()) else {
        return real_pitch();
    };
    allocate(Request {
        api,
        size: size as u64,
        pool: None,
        stream: None,
        // SAFETY: CUDA has written the caller's `out` and `pitch`, checked not null.
        on_device: || unsafe {
            let rc = real_pitch();
            if rc == cudaSuccess {
                (rc, *out, (*pitch as u64).saturating_mul(height as u64))
            } else {
                (rc, std::ptr::null_mut(), 0)
            }
        },
        // SAFETY: `out` and `pitch` are the caller's, checked not null.
        on_host: |ptr| unsafe {
            *out = ptr;
            *pitch = est_pitch;
        },
        managed_flags: cudaMemAttachGlobal,
        always_spill: false,
    })
}

/// # Safety
/// `pitched` is the caller's pointer, as CUDA would receive it.
pub unsafe fn malloc_3d(pitched: *mut cudaPitchedPtr, extent: cudaExtent) -> cudaError_t {
    let estimate = estimated_pitch(extent.width)
        .and_then(|p| Some((p, p.checked_mul(extent.height)?.checked_mul(extent.depth)?)));
    let (Some((est_pitch, size)), false) = (estimate, pitched.is_null()) else {
        // SAFETY: the caller's arguments, as CUDA would receive them.
        return unsafe { real::cudaMalloc3D(pitched, extent) };
    };
    allocate(Request {
        api: Api::cudaMalloc3D,
        size: size as u64,
        pool: None,
        stream: None,
        // SAFETY: CUDA has written the caller's `pitched`, checked not null.
        on_device: || unsafe {
            let rc = real::cudaMalloc3D(pitched, extent);
            if rc == cudaSuccess {
                let p = *pitched;
                (
                    rc,
                    p.ptr,
                    (p.pitch as u64).saturating_mul((extent.height * extent.depth) as u64),
                )
            } else {
                (rc, std::ptr::null_mut(), 0)
            }
        },
        // SAFETY: `pitched` is the caller's, checked not null.
        on_host: |ptr| unsafe {
            *pitched = cudaPitchedPtr {
                ptr,
                pitch: est_pitch,
                xsize: extent.width,
                ysize: extent.height,
            };
        },
        managed_flags: cudaMemAttachGlobal,
        always_spill: false,
    })
}

/// `cudaFree`, `cudaFreeAsync` and the driver's `cuMemFree_v2`,
/// `cuMemFreeAsync`. Managed memory (a spilled block, also once promoted, or
/// the caller's own) is always given back with `cudaFree` or `cuMemFree_v2`,
/// which wait for the device first, as a stream-ordered free requires, and
/// which the stream-ordered frees would refuse. A pointer the shim did not
/// hand out goes to the real function, which answers for it.
///
/// # Safety
/// `ptr` is the caller's pointer, as CUDA would receive it.
pub unsafe fn free(
    api: Api,
    ptr: *mut c_void,
    stream: Option<*mut c_void>,
    real_free: impl FnOnce(*mut c_void) -> cudaError_t,
) -> cudaError_t {
    if ptr.is_null() {
        // cudaFree(0) is how programs make the context: nothing to account.
        return real_free(ptr);
    }
    let state = state();
    // A group's member is freed with the group's last: that free frees the
    // group's block.
    let stream_handle = stream.map(|stream| stream as usize);
    let (ptr, held) = match super::tier::grouped::free(state, api, ptr as usize, stream_handle) {
        Member::No => (ptr, false),
        Member::Done => return cudaSuccess,
        Member::Again => {
            info!(
                "{} of {ptr:p}, which was freed already: refused",
                api.name()
            );
            return cudaErrorInvalidValue;
        }
        Member::Last(start) => (start as *mut c_void, false),
        Member::LastHeld(start) => (start as *mut c_void, true),
    };
    // A tier block freed in stream order is kept, its device bytes still
    // counted; so is a group's that a graph may use, whatever the free.
    let tiered = super::tier::kept::keeps(state, ptr as usize);
    let kept = if held && tiered {
        Some(stream.unwrap_or(std::ptr::null_mut()))
    } else {
        stream.filter(|_| tiered)
    };
    let block = loop {
        let taken = if kept.is_some() {
            state.ledger.take_holding(ptr as usize)
        } else {
            state.ledger.take(ptr as usize)
        };
        match taken {
            Taken::Block(block) => break block,
            Taken::Moving => {
                // Handed to the mover thread: a move not begun is dropped,
                // and the block freed where it is; one under way is waited
                // for.
                super::tier::mover::claim(state, &[ptr as usize]);
                std::thread::yield_now()
            }
            Taken::Unknown => {
                let rc = real_free(ptr);
                state.record(Op::Free, api, -1, ptr as usize, 0, Placement::Unknown, rc);
                info!("{} of {ptr:p}, which vramshare did not hand out (or was freed already): CUDA answered {rc}", api.name());
                return rc;
            }
        }
    };
    let rc = if let Some(stream) = kept {
        super::tier::kept::keep(state, api, ptr as usize, &block, stream as usize, held)
    } else if block.tiered {
        super::tier::free(state, api, ptr as usize, &block)
    } else if block.managed && !matches!(api, Api::cudaFree | Api::cuMemFree_v2) {
        Backend::of(api).free_managed(ptr)
    } else {
        real_free(ptr)
    };
    // After the block joined the kept ones: the pool's reserve, asked in
    // between, never dips.
    if block.tiered {
        super::pool_stats::given_back(state, block.api, block.device, block.size);
    }
    state.record(
        Op::Free,
        api,
        block.device.number() as i32,
        ptr as usize,
        block.size,
        block.placement,
        rc,
    );
    if block.pool != 0 {
        // The pool keeps the block's bytes, counted still: they count on as
        // its slack.
        let backend = Backend::of(api);
        let quota = device_quota(state, block.device, backend);
        let held = if block.placement == Placement::Device {
            block.size
        } else {
            0
        };
        stream_pools::recount_after_free(state, backend, block.pool, block.device, quota, held);
    }
    if block.placement == Placement::Device {
        promote(state, block.device, Backend::of(api));
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitches_are_estimated_in_512_byte_rows() {
        assert_eq!(estimated_pitch(1), Some(512));
        assert_eq!(estimated_pitch(512), Some(512));
        assert_eq!(estimated_pitch(513), Some(1024));
        assert_eq!(estimated_pitch(0), Some(0));
        assert_eq!(estimated_pitch(usize::MAX), None, "no pitch that large");
    }
}
