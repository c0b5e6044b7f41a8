//! Which blocks one fetch moves. The blocks the work names come in first;
//! then, once the step before predicts next uses, the blocks in host memory
//! needed soonest come with them ("ahead"), each only in place of blocks on
//! the device needed later than it, as the furthest-next-use rule would
//! have it at its own use. Bringing them in at one wait for the device,
//! rather than one wait each at the launches that name them, lets their
//! copies run back to back on the copy engines.

use vramshare_common::event::Placement;

use crate::config::Device;
use crate::state::State;

/// At most this share of the tier's bound (the quota, or the pool's budget)
/// comes ahead at one fetch: a prediction that is off costs no more than
/// that many bytes moved for nothing.
const AHEAD_DIVISOR: u64 = 4;

/// What one fetch moves: the blocks to move out, and the blocks to bring
/// in, in order (the work's own first), with whether each came ahead.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub outs: Vec<(usize, u64)>,
    pub ins: Vec<(usize, bool)>,
}

/// Blocks as (next use, size, address), the furthest next use first; of
/// equals, the largest.
pub fn by_next_use(state: &State, blocks: Vec<(usize, u64)>) -> Vec<(u64, u64, usize)> {
    let starts: Vec<usize> = blocks.iter().map(|(ptr, _)| *ptr).collect();
    let next = state.access.next_uses(&state.ledger, &starts);
    let mut order: Vec<(u64, u64, usize)> = blocks
        .into_iter()
        .zip(next)
        .map(|((ptr, size), next)| (next, size, ptr))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order
}

/// The plan for bringing `wanted` (blocks of `device` in host memory, by
/// address and size) onto `device`, where `room` bytes are free under its
/// bound `limit`; `keep` (the work's blocks) stays on the device, and a
/// block that came in during `step` (plus one) does not come ahead again.
pub fn plan(
    state: &State,
    device: Device,
    wanted: &[(usize, u64)],
    keep: &[usize],
    (room, limit, step): (u64, u64, u64),
) -> Plan {
    let coming = |ptr: &usize| wanted.iter().any(|(w, _)| w == ptr);
    let on_device: Vec<(usize, u64)> = state
        .ledger
        .tier_blocks(device, Placement::Device)
        .into_iter()
        .filter(|(ptr, _)| !keep.contains(ptr))
        .collect();
    let victims = by_next_use(state, on_device);
    let ahead = if state.access.steps.predicts() {
        let in_host: Vec<(usize, u64)> = state
            .ledger
            .tier_blocks(device, Placement::Host)
            .into_iter()
            .filter(|(ptr, size)| {
                !coming(ptr)
                    && *size <= limit / 2
                    && state
                        .tier
                        .blocks
                        .get(ptr)
                        .is_some_and(|b| step == 0 || b.fetched_in != step)
            })
            .collect();
        let mut soonest = by_next_use(state, in_host);
        soonest.reverse();
        soonest
    } else {
        Vec::new()
    };
    choose(wanted, &victims, &ahead, room, limit / AHEAD_DIVISOR)
}

/// The choice itself, over (next use, size, address) lists: `victims`
/// furthest first, `ahead` soonest first; at most `cap` bytes come ahead.
fn choose(
    wanted: &[(usize, u64)],
    victims: &[(u64, u64, usize)],
    ahead: &[(u64, u64, usize)],
    mut free: u64,
    cap: u64,
) -> Plan {
    let mut plan = Plan::default();
    let mut taken = 0;
    for (ptr, size) in wanted {
        let mut would = (taken, free);
        while would.1 < *size && would.0 < victims.len() {
            would.1 += victims[would.0].1;
            would.0 += 1;
        }
        // One that cannot fit even so is read in place; the others may.
        if would.1 >= *size {
            plan.outs
                .extend(victims[taken..would.0].iter().map(|(_, s, p)| (*p, *s)));
            (taken, free) = (would.0, would.1 - size);
            plan.ins.push((*ptr, false));
        }
    }
    let mut ahead_bytes = 0;
    for (next, size, ptr) in ahead {
        if *next == u64::MAX || ahead_bytes + size > cap {
            break;
        }
        let mut would = (taken, free);
        while would.1 < *size && would.0 < victims.len() && victims[would.0].0 > *next {
            would.1 += victims[would.0].1;
            would.0 += 1;
        }
        if would.1 < *size {
            break;
        }
        plan.outs
            .extend(victims[taken..would.0].iter().map(|(_, s, p)| (*p, *s)));
        (taken, free) = (would.0, would.1 - size);
        plan.ins.push((*ptr, true));
        ahead_bytes += size;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_ahead_only_in_place_of_blocks_needed_later() {
        // On the device: x needed at 50, y at 10 (furthest first).
        let victims = [(50, 4, 0x10), (10, 4, 0x20)];
        // In host memory: p needed at 20, q at 60.
        let ahead = [(20, 4, 0x30), (60, 4, 0x40)];
        let plan = choose(&[(0x50, 4)], &victims, &ahead, 0, 100);
        assert_eq!(
            plan.ins,
            [(0x50, false)],
            "p would push out y, needed sooner"
        );
        assert_eq!(plan.outs, [(0x10, 4)]);
        // With 4 bytes free, p comes in that room as well.
        let plan = choose(&[(0x50, 4)], &victims, &ahead, 4, 100);
        assert_eq!(plan.ins, [(0x50, false), (0x30, true)]);
        // Out of room of its own, p takes x's place: x is needed after p.
        let plan = choose(&[], &victims, &ahead, 0, 100);
        assert_eq!(plan.ins, [(0x30, true)]);
        assert_eq!(plan.outs, [(0x10, 4)]);
    }

    #[test]
    fn the_work_comes_first_and_ahead_stops_at_its_cap() {
        let victims = [(90, 8, 0x10), (80, 8, 0x20), (70, 8, 0x30)];
        let ahead = [(5, 8, 0x40), (6, 8, 0x50)];
        let plan = choose(&[(0x60, 8)], &victims, &ahead, 0, 8);
        assert_eq!(
            plan.ins,
            [(0x60, false), (0x40, true)],
            "8 bytes ahead at most"
        );
        assert_eq!(plan.outs, [(0x10, 8), (0x20, 8)]);
        // A block the work names that cannot fit is left out; the next one
        // still comes.
        let plan = choose(&[(0x60, 64), (0x70, 8)], &victims, &[], 0, 0);
        assert_eq!(plan.ins, [(0x70, false)]);
        assert_eq!(plan.outs, [(0x10, 8)]);
        // Never used again: nothing comes ahead for it.
        let plan = choose(&[], &victims, &[(u64::MAX, 8, 0x40)], 64, 64);
        assert!(plan.ins.is_empty());
    }
}
