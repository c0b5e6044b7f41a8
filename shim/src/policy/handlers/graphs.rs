//! The handlers of stream capture and executable graphs: what is captured
//! on a stream becomes its graph's, and each executable graph's.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_int, c_void};

use cudart_sys::*;
use vramshare_common::event::Api;

use crate::cuda::real;
use crate::policy::tier::captured;
use crate::state::state;

/// Capture began on `stream` if CUDA said so.
fn began(stream: usize, rc: cudaError_t) -> cudaError_t {
    if rc == cudaSuccess {
        state().access.graphs.begin_capture(stream);
    }
    rc
}

pub unsafe fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_int) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    began(stream as usize, unsafe {
        real::cuStreamBeginCapture_v2(stream, mode)
    })
}

pub unsafe fn cuStreamBeginCapture_v2_ptsz(stream: CUstream, mode: c_int) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    began(stream as usize, unsafe {
        real::cuStreamBeginCapture_v2_ptsz(stream, mode)
    })
}

pub unsafe fn cuStreamEndCapture(stream: CUstream, graph: *mut cudaGraph_t) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        ended(
            Api::cuStreamEndCapture,
            stream,
            graph,
            real::cuStreamEndCapture(stream, graph),
        )
    }
}

pub unsafe fn cuStreamEndCapture_ptsz(stream: CUstream, graph: *mut cudaGraph_t) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        ended(
            Api::cuStreamEndCapture_ptsz,
            stream,
            graph,
            real::cuStreamEndCapture_ptsz(stream, graph),
        )
    }
}

pub unsafe fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: cudaGraph_t,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        instantiated(
            exec,
            graph,
            real::cuGraphInstantiateWithFlags(exec, graph, flags),
        )
    }
}

/// Instantiations with parameters, the runtime's and the driver's: as
/// with flags.
macro_rules! instantiations_with_params {
    ($($name:ident;)*) => {$(
        pub unsafe fn $name(
            exec: *mut cudaGraphExec_t,
            graph: cudaGraph_t,
            params: *mut c_void,
        ) -> cudaError_t {
            // SAFETY: the caller's arguments, as CUDA would receive them.
            unsafe { instantiated(exec, graph, real::$name(exec, graph, params)) }
        }
    )*};
}

instantiations_with_params! {
    cudaGraphInstantiateWithParams;
    cudaGraphInstantiateWithParams_ptsz;
    cuGraphInstantiateWithParams;
    cuGraphInstantiateWithParams_ptsz;
}

pub unsafe fn cuGraphExecDestroy(exec: CUgraphExec) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    destroying_exec(exec, || unsafe { real::cuGraphExecDestroy(exec) })
}

pub unsafe fn cudaStreamBeginCapture(stream: cudaStream_t, mode: c_int) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    began(stream as usize, unsafe {
        real::cudaStreamBeginCapture(stream, mode)
    })
}

pub unsafe fn cudaStreamBeginCapture_ptsz(stream: cudaStream_t, mode: c_int) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    began(stream as usize, unsafe {
        real::cudaStreamBeginCapture_ptsz(stream, mode)
    })
}

/// # Safety
/// `graph` is the caller's out pointer, written by CUDA on success.
unsafe fn ended(
    api: Api,
    stream: cudaStream_t,
    graph: *mut cudaGraph_t,
    rc: cudaError_t,
) -> cudaError_t {
    // SAFETY: CUDA wrote the graph on success; the pointer is the caller's.
    let made = if rc == cudaSuccess && !graph.is_null() {
        unsafe { *graph as usize }
    } else {
        0
    };
    captured::ended(state(), api, stream as usize, made);
    rc
}

pub unsafe fn cudaStreamEndCapture(stream: cudaStream_t, graph: *mut cudaGraph_t) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        ended(
            Api::cudaStreamEndCapture,
            stream,
            graph,
            real::cudaStreamEndCapture(stream, graph),
        )
    }
}

pub unsafe fn cudaStreamEndCapture_ptsz(
    stream: cudaStream_t,
    graph: *mut cudaGraph_t,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        ended(
            Api::cudaStreamEndCapture_ptsz,
            stream,
            graph,
            real::cudaStreamEndCapture_ptsz(stream, graph),
        )
    }
}

/// # Safety
/// `exec` is the caller's out pointer, written by CUDA on success.
unsafe fn instantiated(
    exec: *mut cudaGraphExec_t,
    graph: cudaGraph_t,
    rc: cudaError_t,
) -> cudaError_t {
    if rc == cudaSuccess && !exec.is_null() {
        // SAFETY: CUDA wrote the executable graph on success.
        let made = unsafe { *exec } as usize;
        let state = state();
        let graphs = &state.access.graphs;
        if !graphs.instantiate(made, graph as usize) {
            // Built node by node: its kernel nodes say what it uses now
            // (read at each instantiation, since nodes may change between).
            if let Some(blocks) = crate::policy::blocks_of_nodes(state, graph) {
                graphs.add_exec(made, blocks);
            }
        }
    }
    rc
}

/// Forgotten first: once destroyed, its address may be reused at once.
/// What its capture freed may then go.
fn destroying(graph: cudaGraph_t, real: impl FnOnce() -> cudaError_t) -> cudaError_t {
    let state = state();
    let freed = state.access.graphs.destroy_graph(graph as usize);
    let rc = real();
    captured::unheld(state, freed);
    rc
}

pub unsafe fn cudaGraphDestroy(graph: cudaGraph_t) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    destroying(graph, || unsafe { real::cudaGraphDestroy(graph) })
}

pub unsafe fn cuGraphDestroy(graph: cudaGraph_t) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    destroying(graph, || unsafe { real::cuGraphDestroy(graph) })
}

pub unsafe fn cudaGraphInstantiate(
    exec: *mut cudaGraphExec_t,
    graph: cudaGraph_t,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe { instantiated(exec, graph, real::cudaGraphInstantiate(exec, graph, flags)) }
}

pub unsafe fn cudaGraphInstantiateWithFlags(
    exec: *mut cudaGraphExec_t,
    graph: cudaGraph_t,
    flags: u64,
) -> cudaError_t {
    // SAFETY: the caller's arguments, as CUDA would receive them.
    unsafe {
        instantiated(
            exec,
            graph,
            real::cudaGraphInstantiateWithFlags(exec, graph, flags),
        )
    }
}

pub unsafe fn cudaGraphExecDestroy(exec: cudaGraphExec_t) -> cudaError_t {
    // SAFETY: the caller's argument, as CUDA would receive it.
    destroying_exec(exec, || unsafe { real::cudaGraphExecDestroy(exec) })
}

/// Forgotten first: once destroyed, its address may be reused at once.
/// What its graph's capture freed may then go.
fn destroying_exec(exec: cudaGraphExec_t, real: impl FnOnce() -> cudaError_t) -> cudaError_t {
    let state = state();
    let freed = state.access.graphs.destroy_exec(exec as usize);
    let rc = real();
    captured::unheld(state, freed);
    rc
}
