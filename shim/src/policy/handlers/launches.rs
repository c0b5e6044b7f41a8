//! The handlers of the kernel launches, one macro per shape of call: each
//! says what names the launched function, where its arguments and stream
//! are, and hands the launch to the policy with the real call to make.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;
use crate::policy::launches::{config_stream, Entry, Launched, Params};

/// The runtime's `(func, grid, block, args, shared, stream)` launches; the
/// first argument names the function as `$entry` says.
macro_rules! runtime_launches {
    ($($name:ident($first:ident: $ty:ty) => $entry:ident;)*) => {$(
        pub unsafe fn $name(
            $first: $ty,
            grid: dim3,
            block: dim3,
            args: *mut *mut c_void,
            shared: usize,
            stream: cudaStream_t,
        ) -> cudaError_t {
            let launched = Launched {
                entry: Entry::$entry,
                key: $first as usize,
                params: Params::List(args),
                stream: stream as usize,
            };
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe {
                super::super::launch(Api::$name, launched, || {
                    real::$name($first, grid, block, args, shared, stream)
                })
            }
        }
    )*};
}

runtime_launches! {
    cudaLaunchKernel(func: *const c_void) => HostStub;
    cudaLaunchKernel_ptsz(func: *const c_void) => HostStub;
    __cudaLaunchKernel(kernel: cudaKernel_t) => Kernel;
    __cudaLaunchKernel_ptsz(kernel: cudaKernel_t) => Kernel;
    cudaLaunchCooperativeKernel(func: *const c_void) => HostStub;
    cudaLaunchCooperativeKernel_ptsz(func: *const c_void) => HostStub;
}

/// `cudaLaunchKernelExC` and its `_ptsz` form: the stream is in the
/// launch configuration.
macro_rules! runtime_launches_ex {
    ($($name:ident;)*) => {$(
        pub unsafe fn $name(
            config: *const c_void,
            func: *const c_void,
            args: *mut *mut c_void,
        ) -> cudaError_t {
            let launched = Launched {
                entry: Entry::HostStub,
                key: func as usize,
                params: Params::List(args),
                // SAFETY: the caller's launch configuration.
                stream: unsafe { config_stream(config) },
            };
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe { super::super::launch(Api::$name, launched, || real::$name(config, func, args)) }
        }
    )*};
}

runtime_launches_ex! {
    cudaLaunchKernelExC;
    cudaLaunchKernelExC_ptsz;
}

/// Launches of an executable graph, the runtime's and the driver's.
macro_rules! graph_launches {
    ($($name:ident($graph:ty, $stream:ty);)*) => {$(
        pub unsafe fn $name(graph: $graph, stream: $stream) -> cudaError_t {
            let launched = Launched {
                entry: Entry::Graph,
                key: graph as usize,
                params: Params::None,
                stream: stream as usize,
            };
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe { super::super::launch(Api::$name, launched, || real::$name(graph, stream)) }
        }
    )*};
}

graph_launches! {
    cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
    cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
    cuGraphLaunch(CUgraphExec, CUstream);
    cuGraphLaunch_ptsz(CUgraphExec, CUstream);
}

/// The driver's launches by grid and block dimensions: `cuLaunchKernel`
/// (with `extra`) and `cuLaunchCooperativeKernel` (without).
macro_rules! driver_launches {
    ($($name:ident($($extra:ident)?);)*) => {$(
        pub unsafe fn $name(
            f: CUfunction,
            gx: c_uint,
            gy: c_uint,
            gz: c_uint,
            bx: c_uint,
            by: c_uint,
            bz: c_uint,
            shared: c_uint,
            stream: CUstream,
            params: *mut *mut c_void,
            $($extra: *mut *mut c_void,)?
        ) -> cudaError_t {
            // The cooperative launch has no `extra`.
            let extra = None$(.or(Some($extra)))?.unwrap_or(std::ptr::null_mut());
            let launched = Launched {
                entry: Entry::Function,
                key: f as usize,
                params: driver_params(params, extra),
                stream: stream as usize,
            };
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe {
                super::super::launch(Api::$name, launched, || {
                    real::$name(f, gx, gy, gz, bx, by, bz, shared, stream, params $(, $extra)?)
                })
            }
        }
    )*};
}

driver_launches! {
    cuLaunchKernel(extra);
    cuLaunchKernel_ptsz(extra);
    cuLaunchCooperativeKernel();
    cuLaunchCooperativeKernel_ptsz();
}

/// `cuLaunchKernelEx` and its `_ptsz` form: the stream is in the launch
/// configuration.
macro_rules! driver_launches_ex {
    ($($name:ident;)*) => {$(
        pub unsafe fn $name(
            config: *const c_void,
            f: CUfunction,
            params: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> cudaError_t {
            let launched = Launched {
                entry: Entry::Function,
                key: f as usize,
                params: driver_params(params, extra),
                // SAFETY: the caller's launch configuration.
                stream: unsafe { config_stream(config) },
            };
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe {
                super::super::launch(Api::$name, launched, || real::$name(config, f, params, extra))
            }
        }
    )*};
}

driver_launches_ex! {
    cuLaunchKernelEx;
    cuLaunchKernelEx_ptsz;
}

/// Unloading a module or library: its functions' addresses may now be
/// given to others, so every function is asked about again.
macro_rules! unloads {
    ($($name:ident;)*) => {$(
        pub unsafe fn $name(unloaded: *mut c_void) -> cudaError_t {
            // SAFETY: the caller's argument, as CUDA would receive it.
            let rc = unsafe { real::$name(unloaded) };
            crate::state::state().access.functions.forget_all();
            rc
        }
    )*};
}

unloads! {
    cuModuleUnload;
    cuLibraryUnload;
}

/// The driver's arguments: the list if given, else the packed buffer.
fn driver_params(params: *mut *mut c_void, extra: *mut *mut c_void) -> Params {
    match (params.is_null(), extra.is_null()) {
        (false, _) => Params::List(params),
        (true, false) => Params::Extra(extra),
        (true, true) => Params::None,
    }
}
