//! What the spill tier keeps: the physical memory behind each of its blocks,
//! its kept blocks, its counters, and the gate ([`super::gate`]) that holds
//! the job's launches back while blocks are remapped.
//!
//! A tier block is a reserved address range twice its size: the block at
//! its start, and a staging half where its host memory stays mapped, for
//! moves to copy to and from. Its device memory (while it is on the device)
//! and its host memory (made at its first move to the host, then kept, so a
//! later move pays no pinning) are handles of the virtual memory API. The
//! ledger says where it lives; this says with what.

use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Mutex, RwLock, TryLockError};

use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use crate::config::Device;
use vramshare_common::size::MAX_DEVICES;
use vramshare_common::trace_json::{MovesSample, MOVES_SAMPLES_MAX};

use super::gate::Gate;
use super::listed::Listed;
use super::lock;
use super::reused::Reused;
use super::span::AddressSpan;
use crate::cuda::host_costs;

/// [`Backing::uses_on_device`] before a block's first move onto the device
/// (made there, or handed out): how many uses it serves a trip is known
/// only from a trip that began with a move in.
pub const USES_UNKNOWN: u8 = u8::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backing {
    /// The block's bytes (whole large pages); the range reserved is twice that.
    pub size: u64,
    pub device: Device,
    /// The device memory mapped at the block (0: none, it is on the host).
    pub on_device: u64,
    /// Its host memory (0: none made yet), mapped at the staging half from
    /// when it is made until the block is freed.
    pub in_host: u64,
    /// The step (plus one) in which it last came onto the device.
    pub fetched_in: u64,
    /// When a move onto the device last failed for it (monotonic ns; 0:
    /// never).
    pub failed_ns: u64,
    /// The gate's count of work entered when the block was handed out
    /// (made, or a kept block given again): while the count is unchanged,
    /// no work can have written the block since.
    pub born: u64,
    /// Where moves overlap the job's kernels: the block's own event,
    /// recorded after the latest work that named it (0: none since it was
    /// made, or its uses are not known), and the key of the stream it was
    /// recorded on ([`crate::policy::tier::uses`]).
    pub used: usize,
    pub used_on: usize,
    /// Whether that event is the runtime's (else the driver's).
    pub used_runtime: bool,
    /// Work has named the block since it was handed out, so its uses are
    /// known: it may move out beside the job's kernels.
    pub known: bool,
    /// The uses that named it since it last came onto the device, weighed
    /// by how they read it ([`crate::policy::tier::once`]; [`USES_UNKNOWN`]
    /// until it first comes in).
    pub uses_on_device: u8,
    /// It went out having served at most one use that read it once: work
    /// that reads it once reads it in place.
    pub once: bool,
    /// The step (plus one) in which it was last read in place so (0: not
    /// since it went out).
    pub read_in_place_in: u64,
}

/// A tier block that a stream-ordered free gave back, kept whole (range,
/// memory, mappings) for the next allocation of its size, as CUDA's pools
/// keep freed memory: the job's step allocates the same sizes again, and
/// a kept block costs no virtual memory calls, no pinning and, where it is
/// on the device, no room to be made.
#[derive(Debug)]
pub struct Kept {
    pub ptr: usize,
    pub backing: Backing,
    /// The stream freed on, where later work on it is ordered after the
    /// free (0: none, as for a per-thread default stream).
    pub stream: usize,
    /// Recorded on that stream at the free: once it has completed, no
    /// work the job gave before the free can touch the block.
    pub event: usize,
    /// Whether the event is the runtime's (else the driver's).
    pub runtime_event: bool,
    /// Its range maps nothing: its device memory went back, and a freed
    /// block's bytes need not be kept, so its host memory (at the staging
    /// half) was not mapped in their place. Memory is mapped there again
    /// when it is handed out.
    pub empty: bool,
}

#[derive(Default)]
pub struct Tier {
    /// By the block's address. Changed through [`Tier::insert`] and
    /// [`Tier::remove`], which keep `spans` with it.
    pub blocks: DashMap<usize, Backing, FxBuildHasher>,
    /// The live blocks' starts and sizes, in order: the block an address
    /// falls in ([`Tier::holding`]).
    spans: RwLock<BTreeMap<usize, u64>>,
    /// Where any block made has lain: no address outside is one of the
    /// tier's.
    span: AddressSpan,
    /// Set once the tier has made a block: from then on launches enter the
    /// gate (one load a launch, where asking the map would lock its shards).
    pub active: AtomicBool,
    /// Bytes of tier blocks on the host: moves are looked for only while
    /// some are.
    pub bytes_in_host: AtomicU64,
    /// By device and size, the tier's blocks on the host now and the most
    /// there were at once: how much host memory of each size to keep for
    /// reuse ([`Tier::entered_host`], [`Tier::left_host`]).
    in_host_by_size: Mutex<HashMap<(Device, u64), (u32, u32)>>,
    /// Moves each way and their bytes, since the process began; uses left
    /// in place since their block had come in already that step; and the
    /// time moves held the job back.
    pub moves_in: AtomicU64,
    pub moves_out: AtomicU64,
    pub moved_in: AtomicU64,
    pub moved_out: AtomicU64,
    pub left_in_place: AtomicU64,
    /// Uses that read a block in place as one that served one use a trip
    /// ([`crate::policy::tier::once`]).
    pub read_once_in_place: AtomicU64,
    pub move_ns: AtomicU64,
    /// Time the moves waited for the device to finish the job's work.
    pub drain_ns: AtomicU64,
    /// Of the moves' time: waiting for their copies, remapping ranges,
    /// and making and giving back physical memory.
    pub copy_ns: AtomicU64,
    pub remap_ns: AtomicU64,
    /// Of `remap_ns`: the remaps that end moves to the host (mapping host
    /// memory costs by the page, device memory by the call); a block's
    /// first move out also maps its host memory at the staging half,
    /// counted in `remap_ns` only.
    pub remap_to_host_ns: AtomicU64,
    /// Of `memory_ns`: making device memory for blocks coming in, and
    /// releasing what blocks going out leave.
    pub device_create_ns: AtomicU64,
    pub device_release_ns: AtomicU64,
    /// Queuing moves' copies and their events.
    pub queue_ns: AtomicU64,
    /// Choosing blocks to move out (listing the candidates, ranking them by
    /// next use), inside moves and before them (whether a named block could
    /// come at all): not a part of `move_ns`.
    pub choose_ns: AtomicU64,
    /// Giving kept blocks' device memory back (unmapping it, and mapping a
    /// block's host memory in its place where it has some), inside moves,
    /// at allocations and at quota cuts: not a part of `move_ns`.
    pub give_back_ns: AtomicU64,
    /// Of `give_back_ns`: for the room kept free ahead of need
    /// ([`crate::policy::tier`]'s `room::evict_ahead`), not for a block or
    /// an allocation that needs room now.
    pub give_back_ahead_ns: AtomicU64,
    /// Mapping memory at a kept block's empty range as it is handed out
    /// again (device memory where there is room, else its host memory), at
    /// allocations: not a part of `move_ns`.
    pub hand_out_ns: AtomicU64,
    /// Making new blocks at allocations where no kept block of the size
    /// served (an address range, physical memory, its mappings), and how
    /// many: not a part of `move_ns`.
    pub place_ns: AtomicU64,
    pub placed: AtomicU64,
    /// Ordering work after blocks' uses and recording their events, around
    /// each call that names tier blocks ([`crate::policy::tier::uses`]).
    pub uses_ns: AtomicU64,
    /// Of `uses_ns`: waits on the host, where a call's stream is not known.
    pub uses_wait_ns: AtomicU64,
    /// Time allocations waited for a kept block's stream-ordered free to
    /// be reached, so that its room could be given back.
    pub free_wait_ns: AtomicU64,
    pub memory_ns: AtomicU64,
    /// Making new host memory (pinning it), wherever it was made, and its
    /// bytes.
    pub pinning_ns: AtomicU64,
    pub pinned: AtomicU64,
    /// Host memory given back to the machine while live blocks remained
    /// (over the spares' bound): pinned again if a block needs it.
    pub unpinned: AtomicU64,
    /// Of `pinned`: made while at least as many bytes of host memory lay
    /// unused (spares, kept blocks' in host memory) that could not serve
    /// the block: of another size, or a kept block's whose free was not
    /// reached yet.
    pub pinned_beside_unused: AtomicU64,
    /// Events no longer waited on, made without timing, kept for the next
    /// stream-ordered frees and moves' copies, as (event, whether it is the
    /// runtime's).
    pub spare_events: Mutex<Vec<(usize, bool)>>,
    /// Bytes moved onto the device of blocks no work had entered since
    /// they were handed out: their bytes are not the job's yet.
    pub moved_in_fresh: AtomicU64,
    /// Bytes of new blocks made on the device by moving others out (where
    /// moves overlap the job's kernels), instead of in host memory.
    pub room_at_birth: AtomicU64,
    /// Bytes handed to the mover thread before the point of the step where
    /// the step before's live blocks required the most out of the device,
    /// as soon as nothing used them ([`crate::policy::tier::ahead`]); those
    /// claimed back before their moves began never went out.
    pub out_before_peak: AtomicU64,
    /// Bytes chosen to go out (handed to the mover thread, or staged and
    /// moved; a move claimed back or failed counts too) to make the room
    /// kept free for moves again, after a use or an allocation; and those
    /// chosen for room that a block a use named, or a new block, needed at
    /// once. The rest of the bytes sent out went for quota and budget cuts,
    /// drains, or before the peak.
    pub out_kept_free: AtomicU64,
    pub out_for_room: AtomicU64,
    /// Moves onto the device ahead of need (the step before's record named
    /// the block among the next uses), and their bytes: a part of
    /// `moves_in` and `moved_in`.
    pub ahead_moves: AtomicU64,
    pub ahead_bytes: AtomicU64,
    /// Why blocks did or did not come ahead: the looks at the uses to come
    /// made after uses, while blocks were in host memory (once the gate
    /// closed for them: a look given up before, as while a graph is being
    /// captured or another thread moves blocks, is not counted); of them, those
    /// that found no block there that could come; blocks in host memory
    /// passed over as work queued still read them in place; and the looks
    /// that stopped at a block for want of room to spare.
    pub ahead_looks: AtomicU64,
    pub ahead_none_in_host: AtomicU64,
    pub ahead_passed_busy: AtomicU64,
    pub ahead_short_of_room: AtomicU64,
    /// The latest look at the uses to come found a block in host memory
    /// among them: blocks are coming ahead of need, and room is kept free
    /// for them. No block in host memory at all clears it; a look not made
    /// (nothing recorded ahead, a capture, an unread launch) leaves it as
    /// it was, as measured. One for the process: the tier moves blocks of
    /// processes that see one device only.
    pub ahead_coming: AtomicBool,
    /// Kept blocks' bytes on devices' memory as a sample last found them.
    pub kept_on_device_seen: AtomicU64,
    /// By device: the tier's blocks that serve stream-ordered allocations
    /// of the device's default pool.
    pub ordered: [Ordered; MAX_DEVICES],
    /// Rounds of moves (for a launch, blocks ahead of need, a new block
    /// that needed room, or a quota or budget cut): the gate closed and the
    /// device drained, or, where moves overlap the job's kernels, the gate
    /// closed without a drain.
    pub fetches: AtomicU64,
    /// Of `fetches`: times the device was drained first.
    pub drains: AtomicU64,
    /// Where moves overlap the job's kernels, why moves drained the device
    /// all the same: a launch the shim could not read had been made since
    /// the last drain, or too few blocks whose uses are known could make
    /// room for a block coming in.
    pub drains_unread: AtomicU64,
    pub drains_for_room: AtomicU64,
    /// Where moves overlap the job's kernels: a launch whose parameters
    /// the shim could not read was made since the device was last drained,
    /// so the next move drains it first.
    pub unread_since_drain: AtomicBool,
    /// Where moves overlap the job's kernels: no round of moves for a
    /// while, and none can come beside the kernels, so uses go unrecorded
    /// until the next move drains the device
    /// ([`crate::policy::tier::quiet`]). With the uses counted towards the
    /// next look at whether to go quiet, the rounds of moves at the last
    /// look, the times the tier went quiet, the uses let through
    /// unrecorded, and the moves that drained the device to end the quiet.
    pub quiet: AtomicBool,
    pub uses_looked: AtomicU64,
    pub rounds_at_look: AtomicU64,
    pub quiet_entered: AtomicU64,
    pub unrecorded_uses: AtomicU64,
    pub drains_quiet: AtomicU64,
    pub gate: Gate,
    /// Blocks freed in stream order, the latest last. Those on the device
    /// still count there: their memory is the process's until given back.
    pub kept: Mutex<Vec<Kept>>,
    /// Groups of allocations held one block each ([`super::grouped`]).
    pub grouped: super::grouped::Grouped,
    /// Allocations served from `kept`.
    pub reused: AtomicU64,
    /// Groups made ([`super::grouped`]), and members placed in them after
    /// each group's first.
    pub groups_made: AtomicU64,
    pub grouped_members: AtomicU64,
    /// Kept blocks whose device memory was lent to a block coming in before
    /// their frees were reached ([`crate::policy::tier::kept::lend`]): their
    /// ranges still map it, unmapped once the frees are reached.
    pub lending: Listed<Kept>,
    /// Bytes moved onto the device into memory lent by kept blocks.
    pub moved_in_lent: AtomicU64,
    /// Blocks freed in stream order while a stream was captured, which no
    /// graph holds any more ([`crate::policy::tier::captured`]): given
    /// back once the events after their last uses are reached; kept for
    /// good where a use could not be followed.
    pub freed_in_capture: Listed<super::access::graphs::Freed>,
    /// Host memory no block holds, as (bytes, device, handle), unmapped:
    /// pinning host memory runs at a few GB/s, so a block's host memory is
    /// kept for the next block of its size that needs some.
    pub spare_host: Mutex<Vec<(u64, Device, u64)>>,
    /// The bytes of each host memory handle the tier made: a block may hold
    /// one larger than itself.
    pub host_bytes: Mutex<HashMap<u64, u64>>,
    /// The moves' counters over time, for the trace ([`Tier::sample`]).
    pub samples: Mutex<Samples>,
    /// Moves to the host made on the shim's mover thread.
    pub outgoing: super::outgoing::Outgoing,
    /// The last moves that landed, oldest first ([`RECENT_MOVES`] at
    /// most): what the message of a fault lists.
    pub recent_moves: Mutex<std::collections::VecDeque<RecentMove>>,
}

/// How many of the last moves are kept for a fault's message.
pub const RECENT_MOVES: usize = 12;

/// A move that landed: the block, its size, where it went, and when.
#[derive(Clone, Copy, Debug)]
pub struct RecentMove {
    pub ptr: usize,
    pub size: u64,
    pub to_device: bool,
    pub at: std::time::Instant,
}

/// Samples of the moves' counters, taken at every `stride`-th chance.
#[derive(Default)]
pub struct Samples {
    pub taken: Vec<MovesSample>,
    stride: u64,
    chances: u64,
}

impl Samples {
    /// One chance to take a sample (`take`), holding at most `cap`: a
    /// sample is taken at every `stride`-th chance; when `cap` are held,
    /// every other one goes (the first stays) and the stride doubles, so
    /// that the samples stay evenly spread over the whole run.
    fn offer(&mut self, cap: usize, take: impl FnOnce() -> MovesSample) {
        self.chances += 1;
        if self.chances < self.stride.max(1) {
            return;
        }
        self.chances = 0;
        if self.taken.len() >= cap {
            let mut keep = false;
            self.taken.retain(|_| {
                keep = !keep;
                keep
            });
            self.stride = self.stride.max(1) * 2;
        }
        self.taken.push(take());
    }
}

impl Tier {
    /// A block of `size` bytes of `device`'s is on the host now.
    pub fn entered_host(&self, device: Device, size: u64) {
        self.bytes_in_host.fetch_add(size, SeqCst);
        let mut sizes = lock(&self.in_host_by_size);
        let (now, most) = sizes.entry((device, size)).or_default();
        *now += 1;
        *most = (*most).max(*now);
    }

    /// A block of `size` bytes of `device`'s is no longer on the host.
    pub fn left_host(&self, device: Device, size: u64) {
        self.bytes_in_host.fetch_sub(size, SeqCst);
        if let Some((now, _)) = lock(&self.in_host_by_size).get_mut(&(device, size)) {
            *now = now.saturating_sub(1);
        }
    }

    /// The most blocks of `size` bytes of `device`'s that were on the host
    /// at once.
    pub fn most_in_host_of(&self, device: Device, size: u64) -> usize {
        lock(&self.in_host_by_size)
            .get(&(device, size))
            .map_or(0, |&(_, most)| most as usize)
    }

    /// Adds a live block at `ptr`.
    pub fn insert(&self, ptr: usize, backing: Backing) {
        match self.spans.write() {
            Ok(mut spans) => spans.insert(ptr, backing.size),
            Err(poisoned) => poisoned.into_inner().insert(ptr, backing.size),
        };
        self.span.widen(ptr as u64, backing.size);
        if super::config().moves == crate::config::Moves::Overlap {
            // Moves beside the kernels need every word that may point
            // into a block.
            let (low, high) = self.span.get();
            super::access::collect_within(low, high);
        }
        self.blocks.insert(ptr, backing);
    }

    /// Takes the live block at `ptr` out.
    pub fn remove(&self, ptr: usize) -> Option<(usize, Backing)> {
        match self.spans.write() {
            Ok(mut spans) => spans.remove(&ptr),
            Err(poisoned) => poisoned.into_inner().remove(&ptr),
        };
        self.blocks.remove(&ptr)
    }

    /// The starts of the live blocks that `addresses` fall in, in order,
    /// each once, in `starts`.
    pub fn holding(&self, addresses: &[u64], starts: &mut Reused<usize>) {
        let spans = self.spans.read().unwrap_or_else(|e| e.into_inner());
        for address in addresses {
            let found = spans.range(..=*address as usize).next_back();
            if let Some((start, _)) = found.filter(|(s, n)| *address < **s as u64 + **n) {
                starts.push(*start);
            }
        }
        starts.sort_dedup();
    }

    /// Takes a sample of the moves' counters at `t_ns`, once the tier has
    /// moved anything: at most [`MOVES_SAMPLES_MAX`], spread over the run
    /// ([`Samples::offer`]).
    /// `replay` reads the uses the step before foretold and those it did
    /// not, only when a sample is to be taken.
    pub fn sample(&self, t_ns: u64, replay: impl FnOnce() -> (u64, u64)) {
        if self.moves_in.load(Relaxed) + self.moves_out.load(Relaxed) == 0 {
            return;
        }
        let replay = replay();
        lock(&self.samples).offer(MOVES_SAMPLES_MAX, || self.snapshot(t_ns, replay));
    }

    /// Bytes of kept blocks on devices' memory: room that no live block
    /// holds, counted under the quota until given back. The kept blocks'
    /// lock is held across event queries, which may wait on the driver:
    /// where another thread holds it, the count the last look found, so
    /// that the trace written at exit never waits for it.
    fn kept_on_device(&self) -> u64 {
        let list = match self.kept.try_lock() {
            Ok(list) => list,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return self.kept_on_device_seen.load(Relaxed),
        };
        let bytes = list
            .iter()
            .filter(|kept| kept.backing.on_device != 0)
            .map(|kept| kept.backing.size)
            .sum();
        self.kept_on_device_seen.store(bytes, Relaxed);
        bytes
    }

    /// The moves' counters now (`t_ns`), with the uses the step before
    /// foretold and those it did not (`replay`).
    pub fn snapshot(&self, t_ns: u64, replay: (u64, u64)) -> MovesSample {
        MovesSample {
            t_ns,
            bytes_to_device: self.moved_in.load(Relaxed),
            bytes_to_host: self.moved_out.load(Relaxed),
            move_ns: self.move_ns.load(Relaxed),
            drain_ns: self.drain_ns.load(Relaxed),
            copy_ns: self.copy_ns.load(Relaxed),
            remap_ns: self.remap_ns.load(Relaxed),
            remap_to_host_ns: self.remap_to_host_ns.load(Relaxed),
            device_create_ns: self.device_create_ns.load(Relaxed),
            device_release_ns: self.device_release_ns.load(Relaxed),
            queue_ns: self.queue_ns.load(Relaxed),
            choose_ns: self.choose_ns.load(Relaxed),
            give_back_ns: self.give_back_ns.load(Relaxed),
            give_back_ahead_ns: self.give_back_ahead_ns.load(Relaxed),
            hand_out_ns: self.hand_out_ns.load(Relaxed),
            place_ns: self.place_ns.load(Relaxed),
            placed: self.placed.load(Relaxed),
            uses_ns: self.uses_ns.load(Relaxed),
            uses_wait_ns: self.uses_wait_ns.load(Relaxed),
            memory_ns: self.memory_ns.load(Relaxed),
            pinning_ns: self.pinning_ns.load(Relaxed),
            fetches: self.fetches.load(Relaxed),
            drains: self.drains.load(Relaxed),
            mover_ns: self.outgoing.busy_ns.load(Relaxed),
            mover_copy_ns: self.outgoing.copy_ns.load(Relaxed),
            mover_remap_ns: self.outgoing.remap_ns.load(Relaxed),
            mover_memory_ns: self.outgoing.memory_ns.load(Relaxed),
            mover_claim_wait_ns: self.outgoing.claim_wait_ns.load(Relaxed),
            mover_room_wait_ns: self.outgoing.room_wait_ns.load(Relaxed),
            copier_busy_ns: self.outgoing.copier_busy_ns.load(Relaxed),
            copier_queue_ns: self.outgoing.copier_queue_ns.load(Relaxed),
            free_wait_ns: self.free_wait_ns.load(Relaxed),
            ahead_bytes: self.ahead_bytes.load(Relaxed),
            ahead_looks: self.ahead_looks.load(Relaxed),
            ahead_none_in_host: self.ahead_none_in_host.load(Relaxed),
            ahead_passed_busy: self.ahead_passed_busy.load(Relaxed),
            ahead_short_of_room: self.ahead_short_of_room.load(Relaxed),
            kept_on_device_bytes: self.kept_on_device(),
            made_with_room_bytes: self.room_at_birth.load(Relaxed),
            out_before_peak_bytes: self.out_before_peak.load(Relaxed),
            out_kept_free_bytes: self.out_kept_free.load(Relaxed),
            out_for_room_bytes: self.out_for_room.load(Relaxed),
            pinned_beside_unused_bytes: self.pinned_beside_unused.load(Relaxed),
            replay_matched: replay.0,
            replay_missed: replay.1,
            left_in_place: self.left_in_place.load(Relaxed),
            mover_moves: self.outgoing.made.load(Relaxed),
            mover_claimed: self.outgoing.claimed.load(Relaxed),
            ..host_costs::sample()
        }
    }
}

/// Bytes of the tier's blocks that stand for a default pool's allocations,
/// and the high-water marks of what that pool, with them, has held.
#[derive(Default)]
pub struct Ordered {
    /// The pool (its handle; 0 until the first such block).
    pub pool: AtomicU64,
    /// Bytes of live blocks (allocated and not yet freed).
    pub live: AtomicU64,
    /// The most `live` has been since the marks were last reset.
    pub live_high: AtomicU64,
    /// The most the pool's used bytes and `live` came to together.
    pub used_high: AtomicU64,
    /// The most the pool's reserved bytes, `live` and the kept blocks on
    /// the device came to together.
    pub reserved_high: AtomicU64,
}

#[cfg(test)]
impl Backing {
    /// A block of `size` bytes of the first device, with no memory yet and
    /// no use: for the unit tests.
    pub fn unplaced(size: u64) -> Self {
        Backing {
            size,
            device: Device::all().next().unwrap(),
            on_device: 0,
            in_host: 0,
            fetched_in: 0,
            failed_ns: 0,
            born: 0,
            used: 0,
            used_on: 0,
            used_runtime: false,
            known: false,
            uses_on_device: USES_UNKNOWN,
            once: false,
            read_in_place_in: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local!(static SPARE: std::cell::Cell<Vec<usize>> = Default::default());

    #[test]
    fn an_address_inside_a_live_block_finds_its_start_and_none_after_it_goes() {
        let tier = Tier::default();
        let backing = Backing::unplaced;
        tier.insert(0x4000_0000, backing(4 << 20));
        tier.insert(0x4080_0000, backing(2 << 20));
        let holding = |addresses: &[u64]| {
            let mut starts = Reused::new(&SPARE);
            tier.holding(addresses, &mut starts);
            starts.to_vec()
        };
        let one = |address| holding(&[address]).first().copied();
        assert_eq!(one(0x4000_0000), Some(0x4000_0000));
        assert_eq!(one(0x4010_0008), Some(0x4000_0000), "inside");
        assert_eq!(one(0x4040_0000), None, "just past its end");
        assert_eq!(one(0x4090_0000), Some(0x4080_0000));
        assert_eq!(one(0x3fff_ffff), None, "before the first");
        let both = holding(&[0x4090_0000, 0x4000_0008, 0x4000_0010]);
        assert_eq!(both, [0x4000_0000, 0x4080_0000], "each once, in order");
        assert!(tier.remove(0x4000_0000).is_some());
        assert_eq!(one(0x4010_0008), None, "gone");
    }

    #[test]
    fn samples_stay_evenly_spread_from_the_first_when_thinned() {
        let mut samples = Samples::default();
        for chance in 1..=70u64 {
            samples.offer(8, || MovesSample {
                t_ns: chance,
                ..MovesSample::default()
            });
        }
        let taken: Vec<u64> = samples.taken.iter().map(|s| s.t_ns).collect();
        assert_eq!(taken, [1, 17, 33, 49, 65]);
    }
}
