//! A graph built node by node (`cuGraphAddKernelNode` and friends, as XLA's
//! command buffers do), rather than captured from a stream: what its kernels
//! use is read from its nodes when it is instantiated. Each kernel node's
//! function and arguments are asked of the driver, which owns copies of them,
//! and read like a launch's; child graphs are read in turn. Memory copies
//! and sets are not kernels and name nothing, as on a stream.

use std::ffi::{c_int, c_void};

use cudart_sys::{cudaGraph_t, CUfunction};

use super::launches::{self, Entry, Params};
use crate::cuda::real;
use crate::state::State;

const KERNEL_NODE: c_int = 0;
const CHILD_GRAPH_NODE: c_int = 4;

/// Nodes read in one graph, and child graphs followed below it, at most: a
/// graph is a step's work, not unbounded.
const MAX_NODES: usize = 1 << 14;
const MAX_DEPTH: usize = 8;

/// `CUDA_KERNEL_NODE_PARAMS_v2` as the driver fills it: the function (or,
/// from CUDA 12, the library kernel in `kern`), the grid, the arguments.
#[repr(C)]
struct KernelNodeParams {
    func: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: *mut c_void,
    ctx: *mut c_void,
    /// Room for fields a later driver may add.
    _reserved: [u64; 8],
}

/// The blocks (by start) the kernels of `graph` name; `None` if the driver
/// could not list its nodes.
pub fn blocks_of_nodes(state: &State, graph: cudaGraph_t) -> Option<Vec<usize>> {
    let mut blocks = Vec::new();
    let mut budget = MAX_NODES;
    read_graph(state, graph, 0, &mut budget, &mut blocks)?;
    blocks.sort_unstable();
    blocks.dedup();
    Some(blocks)
}

fn read_graph(
    state: &State,
    graph: cudaGraph_t,
    depth: usize,
    budget: &mut usize,
    blocks: &mut Vec<usize>,
) -> Option<()> {
    for node in nodes(graph, *budget)? {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let mut kind: c_int = -1;
        // SAFETY: a node the driver listed, and an out pointer we own.
        if unsafe { real::cuGraphNodeGetType(node, &mut kind) } != 0 {
            continue;
        }
        match kind {
            KERNEL_NODE => kernel_node(state, node, blocks),
            CHILD_GRAPH_NODE if depth < MAX_DEPTH => {
                let mut child: cudaGraph_t = std::ptr::null_mut();
                // SAFETY: as above.
                let rc = unsafe { real::cuGraphChildGraphNodeGetGraph(node, &mut child) };
                if rc == 0 && !child.is_null() {
                    read_graph(state, child, depth + 1, budget, blocks);
                }
            }
            _ => {}
        }
    }
    Some(())
}

/// The nodes of `graph`, at most `most` of them.
fn nodes(graph: cudaGraph_t, most: usize) -> Option<Vec<*mut c_void>> {
    let mut count = 0usize;
    // SAFETY: a null list asks for the count only.
    if unsafe { real::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) } != 0 {
        return None;
    }
    let mut nodes = vec![std::ptr::null_mut(); count.min(most)];
    let mut filled = nodes.len();
    // SAFETY: room for `filled` nodes; the driver writes at most that many.
    if unsafe { real::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut filled) } != 0 {
        return None;
    }
    nodes.truncate(filled);
    Some(nodes)
}

/// Adds the blocks a kernel node's arguments name.
fn kernel_node(state: &State, node: *mut c_void, blocks: &mut Vec<usize>) {
    // SAFETY: plain integers and pointers; all zero is a valid value.
    let mut params: KernelNodeParams = unsafe { std::mem::zeroed() };
    // SAFETY: a kernel node, and room for the driver's whole structure.
    if unsafe {
        real::cuGraphKernelNodeGetParams_v2(node, (&mut params as *mut KernelNodeParams).cast())
    } != 0
    {
        return;
    }
    let (entry, key) = if !params.func.is_null() {
        (Entry::Function, params.func as usize)
    } else {
        (Entry::Kernel, params.kern as usize)
    };
    let arguments = if !params.kernel_params.is_null() {
        Params::List(params.kernel_params)
    } else {
        Params::Extra(params.extra)
    };
    let named = state.access.blocks_named(&state.ledger, |naming| {
        // SAFETY: the driver's own copy of the node's arguments, laid out
        // as the function's parameters are.
        unsafe { launches::read_arguments(entry, key, arguments, naming) }
    });
    blocks.extend(named);
}
