//! Blocks read in place where bringing them in would cost more: a block
//! that served at most one use on the device before it went out again
//! (a weight a token's product reads once, an activation written and read
//! once) is read in place over the link by later work that reads each byte
//! about once, once a step. A move carries such a block's bytes twice, in
//! and then out again, with a remap each way; a read in place carries them
//! once.
//!
//! Work that reads its operands many times over (a product whose sides are
//! both wide, cuDNN's calls, a graph's launch) still brings the block in,
//! and its uses count twice, so that the block stays until it goes out as
//! any other; so does a second read in place in one step.

use std::ffi::c_int;
use std::sync::atomic::Ordering::Relaxed;

use crate::state::tier::{Backing, USES_UNKNOWN};
use crate::state::State;

/// How the work about to run reads the blocks it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Each byte about once: a kernel launched outside a library call, a
    /// copy or a memset, a product with a side of at most [`THIN`].
    Once,
    /// Many times over: a product with both sides wider, cuBLASLt's
    /// products (whose shapes are in layouts the shim does not read),
    /// cuDNN's calls, a graph's launch.
    Many,
}

/// The widest side of a product whose wide operand is read about once:
/// its kernels tile the thin side in one or two tiles. A decoding step's
/// products (a few tokens against a weight) are this thin.
pub const THIN: c_int = 64;

impl Reads {
    /// How a product of an `m` × k matrix by a k × `n` one reads them.
    pub fn of_product(m: c_int, n: c_int) -> Reads {
        if m.min(n) <= THIN {
            Reads::Once
        } else {
            Reads::Many
        }
    }

    fn weight(self) -> u8 {
        match self {
            Reads::Once => 1,
            Reads::Many => 2,
        }
    }
}

/// Whether uses are counted: once a block has come onto the device by a
/// move (before, every block's count is [`USES_UNKNOWN`]).
pub fn counting(state: &State) -> bool {
    state.tier.moves_in.load(Relaxed) > 0
}

/// After the moves for a use: counts it for each of the tier's blocks in
/// `named` that is on the device.
pub fn count(state: &State, named: &[usize], reads: Reads) {
    if !counting(state) {
        return;
    }
    for ptr in named {
        if let Some(mut backing) = state.tier.blocks.get_mut(ptr) {
            if backing.on_device != 0 {
                backing.uses_on_device = backing.uses_on_device.saturating_add(reads.weight());
            }
        }
    }
}

/// Whether work that `reads` the tier block at `ptr` this way reads it in
/// place, where it could come in: it went out having served one use that
/// read it once, and was not read in place so already in this step (the
/// job's marked step, or one found in the launch sequence). A second such
/// read in one step ends the mark: the block is read more often than it
/// came in for, and comes in. Counted.
pub fn stays(state: &State, ptr: usize, reads: Reads) -> bool {
    if reads != Reads::Once {
        return false;
    }
    let Some(mut backing) = state.tier.blocks.get_mut(&ptr) else {
        return false;
    };
    if !backing.once {
        return false;
    }
    let step = state.access.steps.current() + 1;
    if backing.read_in_place_in == step {
        backing.once = false;
        return false;
    }
    backing.read_in_place_in = step;
    state.tier.read_once_in_place.fetch_add(1, Relaxed);
    true
}

/// As a block comes onto the device: its uses there are counted afresh.
pub fn came_in(backing: &mut Backing) {
    backing.uses_on_device = 0;
}

/// As a block goes to host memory: whether it served one use that read
/// it once since it came onto the device (not known, and so not, for a
/// block that has not come in since it was made or handed out).
pub fn went_out(backing: &mut Backing) {
    backing.once = backing.uses_on_device <= Reads::Once.weight();
    backing.read_in_place_in = 0;
}

/// As a block is made or handed out again as a new one.
pub fn handed_out(backing: &mut Backing) {
    backing.uses_on_device = USES_UNKNOWN;
    backing.once = false;
    backing.read_in_place_in = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_product_with_a_thin_side_reads_once_and_a_wide_one_many_times() {
        assert_eq!(Reads::of_product(4096, 16), Reads::Once, "a decoding step");
        assert_eq!(Reads::of_product(64, 8192), Reads::Once);
        assert_eq!(Reads::of_product(65, 8192), Reads::Many);
        assert_eq!(Reads::of_product(2048, 4096), Reads::Many, "a prompt");
    }

    #[test]
    fn a_block_that_served_one_use_that_read_it_once_goes_out_as_once() {
        let mut block = Backing::unplaced(2 << 20);
        handed_out(&mut block);
        block.uses_on_device = block.uses_on_device.saturating_add(Reads::Once.weight());
        went_out(&mut block);
        assert!(!block.once, "its first trip did not begin with a move in");
        came_in(&mut block);
        block.uses_on_device += Reads::Once.weight();
        went_out(&mut block);
        assert!(block.once);
        came_in(&mut block);
        block.uses_on_device += Reads::Many.weight();
        went_out(&mut block);
        assert!(
            !block.once,
            "a use that reads it many times keeps it coming"
        );
        came_in(&mut block);
        block.uses_on_device += 2 * Reads::Once.weight();
        went_out(&mut block);
        assert!(!block.once, "two uses");
        came_in(&mut block);
        went_out(&mut block);
        assert!(block.once, "no use at all since it came");
    }
}
