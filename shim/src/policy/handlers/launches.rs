//! The handlers of the kernel launches.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_uint, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;
use crate::policy::launches::{config_stream, Entry, Launched, Params};

// Kernel launches.

pub unsafe fn cudaLaunchKernel(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::HostStub,
        key: func as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaLaunchKernel, launched, || {
            real::cudaLaunchKernel(func, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::HostStub,
        key: func as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaLaunchKernel_ptsz, launched, || {
            real::cudaLaunchKernel_ptsz(func, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn __cudaLaunchKernel(
    kernel: cudaKernel_t,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Kernel,
        key: kernel as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::__cudaLaunchKernel, launched, || {
            real::__cudaLaunchKernel(kernel, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn __cudaLaunchKernel_ptsz(
    kernel: cudaKernel_t,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Kernel,
        key: kernel as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::__cudaLaunchKernel_ptsz, launched, || {
            real::__cudaLaunchKernel_ptsz(kernel, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn cudaLaunchCooperativeKernel(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::HostStub,
        key: func as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaLaunchCooperativeKernel, launched, || {
            real::cudaLaunchCooperativeKernel(func, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn cudaLaunchCooperativeKernel_ptsz(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::HostStub,
        key: func as usize,
        params: Params::List(args),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaLaunchCooperativeKernel_ptsz, launched, || {
            real::cudaLaunchCooperativeKernel_ptsz(func, grid, block, args, shared, stream)
        })
    }
}

pub unsafe fn cudaLaunchKernelExC(
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
    unsafe {
        super::super::launch(Api::cudaLaunchKernelExC, launched, || {
            real::cudaLaunchKernelExC(config, func, args)
        })
    }
}

pub unsafe fn cudaLaunchKernelExC_ptsz(
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
    unsafe {
        super::super::launch(Api::cudaLaunchKernelExC_ptsz, launched, || {
            real::cudaLaunchKernelExC_ptsz(config, func, args)
        })
    }
}

pub unsafe fn cudaGraphLaunch(graph: cudaGraphExec_t, stream: cudaStream_t) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Graph,
        key: graph as usize,
        params: Params::None,
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaGraphLaunch, launched, || {
            real::cudaGraphLaunch(graph, stream)
        })
    }
}

pub unsafe fn cudaGraphLaunch_ptsz(graph: cudaGraphExec_t, stream: cudaStream_t) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Graph,
        key: graph as usize,
        params: Params::None,
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cudaGraphLaunch_ptsz, launched, || {
            real::cudaGraphLaunch_ptsz(graph, stream)
        })
    }
}

pub unsafe fn cuGraphLaunch(graph: CUgraphExec, stream: CUstream) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Graph,
        key: graph as usize,
        params: Params::None,
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuGraphLaunch, launched, || {
            real::cuGraphLaunch(graph, stream)
        })
    }
}

pub unsafe fn cuGraphLaunch_ptsz(graph: CUgraphExec, stream: CUstream) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Graph,
        key: graph as usize,
        params: Params::None,
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuGraphLaunch_ptsz, launched, || {
            real::cuGraphLaunch_ptsz(graph, stream)
        })
    }
}

pub unsafe fn cuLaunchKernel(
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
    extra: *mut *mut c_void,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Function,
        key: f as usize,
        params: driver_params(params, extra),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuLaunchKernel, launched, || {
            real::cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
        })
    }
}

pub unsafe fn cuLaunchKernel_ptsz(
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
    extra: *mut *mut c_void,
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Function,
        key: f as usize,
        params: driver_params(params, extra),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuLaunchKernel_ptsz, launched, || {
            real::cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)
        })
    }
}

pub unsafe fn cuLaunchCooperativeKernel(
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
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Function,
        key: f as usize,
        params: Params::List(params),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuLaunchCooperativeKernel, launched, || {
            real::cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params)
        })
    }
}

pub unsafe fn cuLaunchCooperativeKernel_ptsz(
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
) -> cudaError_t {
    let launched = Launched {
        entry: Entry::Function,
        key: f as usize,
        params: Params::List(params),
        stream: stream as usize,
    };
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        super::super::launch(Api::cuLaunchCooperativeKernel_ptsz, launched, || {
            real::cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, stream, params)
        })
    }
}

pub unsafe fn cuLaunchKernelEx(
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
        super::super::launch(Api::cuLaunchKernelEx, launched, || {
            real::cuLaunchKernelEx(config, f, params, extra)
        })
    }
}

pub unsafe fn cuLaunchKernelEx_ptsz(
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
        super::super::launch(Api::cuLaunchKernelEx_ptsz, launched, || {
            real::cuLaunchKernelEx_ptsz(config, f, params, extra)
        })
    }
}

pub unsafe fn cuModuleUnload(module: *mut c_void) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    let rc = unsafe { real::cuModuleUnload(module) };
    // Its functions' addresses may now be given to others.
    crate::state::state().access.functions.forget_all();
    rc
}

pub unsafe fn cuLibraryUnload(library: *mut c_void) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    let rc = unsafe { real::cuLibraryUnload(library) };
    crate::state::state().access.functions.forget_all();
    rc
}

/// The driver's arguments: the list if given, else the packed buffer.
fn driver_params(params: *mut *mut c_void, extra: *mut *mut c_void) -> Params {
    match (params.is_null(), extra.is_null()) {
        (false, _) => Params::List(params),
        (true, false) => Params::Extra(extra),
        (true, true) => Params::None,
    }
}
