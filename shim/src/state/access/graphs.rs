//! CUDA graphs: the blocks a graph's kernels use are learned while the graph
//! is captured (the launches made on a capturing stream are recorded, not
//! run) and kept with the graph and each executable graph made from it, or
//! read from a graph's nodes each time a graph built node by node is
//! instantiated; a launch of the executable graph then names them.
//! While nothing is being captured, a launch pays one relaxed load here.
//!
//! The tier blocks a capture frees in stream order are held the same way,
//! by the graph and each executable graph made from it, until none is left
//! ([`crate::policy::tier::captured`]).

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::state::lock;
use crate::state::tier::Backing;

/// Graphs (and executable graphs) remembered at most; past this, new ones
/// are not, and their launches name nothing.
const MAX_GRAPHS: usize = 4096;

/// Blocks a capture or graph names at most.
const MAX_BLOCKS: usize = 1 << 16;

/// An event of the tier's: its handle, and whether it is the runtime's.
pub type EventHandle = (usize, bool);

/// What one capture freed in stream order: tier blocks (start, backing)
/// that its graph's kernels may use whenever it runs, and the events to be
/// reached before they are given back: the capture's end on its stream
/// (work given there before the capture), and the last launch of each
/// executable graph made from it (CUDA orders a launch after the executable
/// graph's earlier ones).
#[derive(Debug, Default)]
pub struct Freed {
    pub blocks: Vec<(usize, Backing)>,
    pub after: Vec<EventHandle>,
    /// Never given back: some use could not be followed by an event.
    pub for_good: bool,
}

/// A stream being captured: the blocks its launches named, and the tier
/// blocks freed on it.
#[derive(Default)]
struct Capture {
    named: Vec<usize>,
    freed: Vec<(usize, Backing)>,
}

/// What captures freed, by the graphs and executable graphs holding it.
#[derive(Default)]
struct Holders {
    next: u64,
    /// By id: what one capture freed, and how many hold it.
    freed: HashMap<u64, (Freed, usize)>,
    graphs: HashMap<usize, u64>,
    /// The id each executable graph holds, and the event of its last
    /// launch.
    execs: HashMap<usize, (u64, Option<EventHandle>)>,
}

impl Holders {
    /// A holder of `id` is gone, its last launch followed by `launched`:
    /// what `id` names, once nothing holds it.
    fn let_go(&mut self, id: u64, launched: Option<EventHandle>) -> Option<Freed> {
        let (freed, holders) = self.freed.get_mut(&id)?;
        freed.after.extend(launched);
        *holders -= 1;
        if *holders > 0 {
            return None;
        }
        self.freed.remove(&id).map(|(freed, _)| freed)
    }
}

#[derive(Default)]
pub struct Graphs {
    /// Streams being captured (checked before taking the lock).
    capturing: AtomicUsize,
    captures: Mutex<HashMap<usize, Capture>>,
    graphs: Mutex<HashMap<usize, Arc<[usize]>>>,
    execs: Mutex<HashMap<usize, Arc<[usize]>>>,
    holders: Mutex<Holders>,
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
        if lock(&self.captures)
            .insert(stream, Capture::default())
            .is_none()
        {
            self.capturing.fetch_add(1, Relaxed);
        }
    }

    /// A launch on a capturing stream named these blocks (by start).
    pub fn record(&self, stream: usize, blocks: &[usize]) {
        if let Some(Capture { named, .. }) = lock(&self.captures).get_mut(&stream) {
            for block in blocks {
                if named.len() < MAX_BLOCKS && !named.contains(block) {
                    named.push(*block);
                }
            }
        }
    }

    /// The tier block at `ptr` was freed in stream order on `stream`: if
    /// that stream is being captured, the block is its capture's (given
    /// back by [`Graphs::end_capture`]); else it comes back.
    pub fn freed(&self, stream: usize, ptr: usize, backing: Backing) -> Result<(), Backing> {
        match lock(&self.captures).get_mut(&stream) {
            Some(capture) => {
                capture.freed.push((ptr, backing));
                Ok(())
            }
            None => Err(backing),
        }
    }

    /// The capture on `stream` ended in `graph` (null if it failed); the
    /// tier blocks freed on it, for [`Graphs::hold`].
    pub fn end_capture(&self, stream: usize, graph: usize) -> Vec<(usize, Backing)> {
        let Some(capture) = lock(&self.captures).remove(&stream) else {
            return Vec::new();
        };
        let _ = self
            .capturing
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        let mut graphs = lock(&self.graphs);
        if graph != 0 && graphs.len() < MAX_GRAPHS {
            graphs.insert(graph, capture.named.into());
        }
        capture.freed
    }

    /// `graph` (null: none, the capture failed) holds what its capture
    /// freed; what nothing holds comes back.
    pub fn hold(&self, graph: usize, freed: Freed) -> Option<Freed> {
        if graph == 0 {
            return Some(freed);
        }
        let mut holders = lock(&self.holders);
        let id = holders.next;
        holders.next += 1;
        holders.freed.insert(id, (freed, 1));
        holders.graphs.insert(graph, id);
        None
    }

    /// `exec` was made from a graph whose nodes name `blocks`.
    pub fn add_exec(&self, exec: usize, mut blocks: Vec<usize>) {
        blocks.truncate(MAX_BLOCKS);
        let mut execs = lock(&self.execs);
        if execs.len() < MAX_GRAPHS {
            execs.insert(exec, blocks.into());
        }
    }

    /// `graph` was destroyed (its executable graphs live on); what its
    /// capture freed, if nothing holds it any more.
    pub fn destroy_graph(&self, graph: usize) -> Option<Freed> {
        lock(&self.graphs).remove(&graph);
        let mut holders = lock(&self.holders);
        let id = holders.graphs.remove(&graph)?;
        holders.let_go(id, None)
    }

    /// `exec` was made from `graph`; whether `graph` was captured here (if
    /// not, `exec` names nothing until [`Graphs::add_exec`] says what).
    /// `exec` holds what the capture freed, as `graph` does.
    pub fn instantiate(&self, exec: usize, graph: usize) -> bool {
        {
            let mut holders = lock(&self.holders);
            if let Some(&id) = holders.graphs.get(&graph) {
                if let Some((_, count)) = holders.freed.get_mut(&id) {
                    *count += 1;
                    holders.execs.insert(exec, (id, None));
                }
            }
        }
        let Some(named) = lock(&self.graphs).get(&graph).cloned() else {
            return false;
        };
        let mut execs = lock(&self.execs);
        if execs.len() < MAX_GRAPHS {
            execs.insert(exec, named);
        }
        true
    }

    /// `exec` was destroyed; what its graph's capture freed, if nothing
    /// holds it any more.
    pub fn destroy_exec(&self, exec: usize) -> Option<Freed> {
        lock(&self.execs).remove(&exec);
        let mut holders = lock(&self.holders);
        let (id, launched) = holders.execs.remove(&exec)?;
        holders.let_go(id, launched)
    }

    /// A launch of `exec` was made: if it holds what a capture freed,
    /// `follow` records an event after the launch, given the one after its
    /// last launch (to record again or give back); `None` if it could not,
    /// and what the capture freed is then never given back.
    pub fn launched(
        &self,
        exec: usize,
        follow: impl FnOnce(Option<EventHandle>) -> Option<EventHandle>,
    ) {
        let mut holders = lock(&self.holders);
        let Holders { freed, execs, .. } = &mut *holders;
        let Some((id, last)) = execs.get_mut(&exec) else {
            return;
        };
        *last = follow(last.take());
        if last.is_none() {
            if let Some((freed, _)) = freed.get_mut(id) {
                freed.for_good = true;
            }
        }
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

    fn block(size: u64) -> Backing {
        Backing::unplaced(size)
    }

    /// A capture on 0x51 that frees the block at 0x1000, its graph 0xaaa.
    fn captured_freeing(graphs: &Graphs) {
        graphs.begin_capture(0x51);
        assert!(graphs.freed(0x51, 0x1000, block(2 << 20)).is_ok());
        let blocks = graphs.end_capture(0x51, 0xaaa);
        assert_eq!(blocks.len(), 1);
        let freed = Freed {
            blocks,
            after: vec![(0xe0, true)],
            for_good: false,
        };
        assert!(graphs.hold(0xaaa, freed).is_none());
    }

    #[test]
    fn what_a_capture_freed_comes_back_once_its_graph_and_executable_graphs_are_gone() {
        let graphs = Graphs::default();
        assert!(
            graphs.freed(0x51, 0x1000, block(2 << 20)).is_err(),
            "not captured"
        );
        captured_freeing(&graphs);
        assert!(graphs.instantiate(0xe1, 0xaaa));
        assert!(graphs.instantiate(0xe2, 0xaaa));
        let mut follows = 0;
        graphs.launched(0xe1, |last| {
            assert_eq!(last, None, "not launched before");
            Some((0xe5, true))
        });
        graphs.launched(0xe1, |last| {
            assert_eq!(last, Some((0xe5, true)), "recorded again");
            last
        });
        graphs.launched(0xe9, |_| {
            follows += 1;
            None
        });
        assert_eq!(follows, 0, "an executable graph that holds nothing");
        assert!(
            graphs.destroy_graph(0xaaa).is_none(),
            "the executables hold it"
        );
        assert!(graphs.destroy_exec(0xe1).is_none(), "0xe2 holds it");
        let freed = graphs.destroy_exec(0xe2).expect("nothing holds it");
        assert_eq!(
            freed.blocks.iter().map(|b| b.0).collect::<Vec<_>>(),
            [0x1000]
        );
        assert_eq!(freed.after, [(0xe0, true), (0xe5, true)]);
        assert!(!freed.for_good);
        assert!(graphs.destroy_exec(0xe2).is_none(), "once");
    }

    #[test]
    fn what_a_capture_freed_is_kept_for_good_where_a_launch_went_unfollowed() {
        let graphs = Graphs::default();
        captured_freeing(&graphs);
        assert!(
            graphs.destroy_graph(0xaaa).is_some(),
            "nothing else holds it"
        );
        captured_freeing(&graphs);
        assert!(graphs.instantiate(0xe1, 0xaaa));
        graphs.launched(0xe1, |_| None);
        assert!(graphs.destroy_exec(0xe1).is_none());
        let freed = graphs.destroy_graph(0xaaa).expect("nothing holds it");
        assert!(freed.for_good);
        // A failed capture's frees have no graph to hold them.
        graphs.begin_capture(0x52);
        assert!(graphs.freed(0x52, 0x2000, block(2 << 20)).is_ok());
        let blocks = graphs.end_capture(0x52, 0);
        assert!(graphs
            .hold(
                0,
                Freed {
                    blocks,
                    ..Freed::default()
                }
            )
            .is_some());
    }
}
