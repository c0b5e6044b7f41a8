//! CUDA graphs: the blocks a graph's kernels use are learned while the graph
//! is captured (the launches made on a capturing stream are recorded, not
//! run) and kept with the graph and each executable graph made from it, or
//! read from a graph's nodes each time a graph built node by node is
//! instantiated; a launch of the executable graph then names them.
//! While nothing is being captured, a launch pays one relaxed load here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::state::lock;

/// Graphs (and executable graphs) remembered at most; past this, new ones
/// are not, and their launches name nothing.
const MAX_GRAPHS: usize = 4096;

/// Blocks a capture or graph names at most.
const MAX_BLOCKS: usize = 1 << 16;

#[derive(Default)]
pub struct Graphs {
    /// Streams being captured (checked before taking the lock).
    capturing: AtomicUsize,
    captures: Mutex<HashMap<usize, Vec<usize>>>,
    graphs: Mutex<HashMap<usize, Arc<[usize]>>>,
    execs: Mutex<HashMap<usize, Arc<[usize]>>>,
}

impl Graphs {
    /// Whether `stream` is being captured.
    #[inline]
    pub fn capturing(&self, stream: usize) -> bool {
        self.capturing.load(Relaxed) > 0 && lock(&self.captures).contains_key(&stream)
    }

    /// Whether any stream is being captured (a wait for the whole device
    /// would then end the capture in error).
    pub fn capturing_any(&self) -> bool {
        self.capturing.load(Relaxed) > 0
    }

    pub fn begin_capture(&self, stream: usize) {
        if lock(&self.captures).insert(stream, Vec::new()).is_none() {
            self.capturing.fetch_add(1, Relaxed);
        }
    }

    /// A launch on a capturing stream named these blocks (by start).
    pub fn record(&self, stream: usize, blocks: &[usize]) {
        if let Some(named) = lock(&self.captures).get_mut(&stream) {
            for block in blocks {
                if named.len() < MAX_BLOCKS && !named.contains(block) {
                    named.push(*block);
                }
            }
        }
    }

    /// The capture on `stream` ended in `graph` (null if it failed).
    pub fn end_capture(&self, stream: usize, graph: usize) {
        let Some(named) = lock(&self.captures).remove(&stream) else {
            return;
        };
        let _ = self
            .capturing
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        let mut graphs = lock(&self.graphs);
        if graph != 0 && graphs.len() < MAX_GRAPHS {
            graphs.insert(graph, named.into());
        }
    }

    /// `exec` was made from a graph whose nodes name `blocks`.
    pub fn add_exec(&self, exec: usize, mut blocks: Vec<usize>) {
        blocks.truncate(MAX_BLOCKS);
        let mut execs = lock(&self.execs);
        if execs.len() < MAX_GRAPHS {
            execs.insert(exec, blocks.into());
        }
    }

    /// `graph` was destroyed (its executable graphs live on).
    pub fn destroy_graph(&self, graph: usize) {
        lock(&self.graphs).remove(&graph);
    }

    /// `exec` was made from `graph`; whether `graph` was captured here (if
    /// not, `exec` names nothing until [`Graphs::add_exec`] says what).
    pub fn instantiate(&self, exec: usize, graph: usize) -> bool {
        let Some(named) = lock(&self.graphs).get(&graph).cloned() else {
            return false;
        };
        let mut execs = lock(&self.execs);
        if execs.len() < MAX_GRAPHS {
            execs.insert(exec, named);
        }
        true
    }

    pub fn destroy_exec(&self, exec: usize) {
        lock(&self.execs).remove(&exec);
    }

    /// The blocks a launch of `exec` names, if its graph was captured here.
    pub fn blocks_of(&self, exec: usize) -> Option<Arc<[usize]>> {
        lock(&self.execs).get(&exec).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_captured_graphs_blocks_follow_it_to_its_executable_graphs() {
        let graphs = Graphs::default();
        assert!(!graphs.capturing(0x51));
        graphs.begin_capture(0x51);
        assert!(graphs.capturing(0x51) && !graphs.capturing(0x52));
        graphs.record(0x51, &[0x1000, 0x2000]);
        graphs.record(0x52, &[0x9000]);
        graphs.record(0x51, &[0x2000, 0x3000]);
        graphs.end_capture(0x51, 0xaaa);
        assert!(!graphs.capturing(0x51));
        assert!(graphs.instantiate(0xe1, 0xaaa));
        assert!(
            !graphs.instantiate(0xe2, 0xbbb),
            "a graph not captured here"
        );
        assert_eq!(
            graphs.blocks_of(0xe1).as_deref(),
            Some(&[0x1000, 0x2000, 0x3000][..])
        );
        assert_eq!(graphs.blocks_of(0xe2), None, "a graph not captured here");
        graphs.destroy_exec(0xe1);
        assert_eq!(graphs.blocks_of(0xe1), None);
        // A graph destroyed is forgotten; its executable graphs are not.
        assert!(graphs.instantiate(0xe3, 0xaaa));
        graphs.destroy_graph(0xaaa);
        assert!(!graphs.instantiate(0xe4, 0xaaa));
        assert_eq!(graphs.blocks_of(0xe4), None);
        assert!(graphs.blocks_of(0xe3).is_some());
        graphs.add_exec(0xe2, vec![0x4000]);
        assert_eq!(graphs.blocks_of(0xe2).as_deref(), Some(&[0x4000][..]));
    }
}
