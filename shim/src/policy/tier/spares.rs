//! The device memory the tier keeps after a block moved to the host
//! ([`crate::state::tier::Spare`]): a block of the same size coming onto
//! the device takes it instead of making memory. Spares hold at most the
//! move budget of their device; anything else that wants the room (an
//! allocation, a quota cut, a pool member of higher priority) has them
//! given back first.

use crate::config::Device;
use crate::state::tier::Spare;
use crate::state::{lock, State};

use super::backing;

/// Takes a spare of exactly `size` bytes on `device`: its handle, whose
/// bytes are reserved already (they pass to the block it is mapped at).
pub fn take(state: &State, device: Device, size: u64) -> Option<u64> {
    let mut spares = lock(&state.tier.spares);
    let at = spares
        .iter()
        .position(|s| s.device == device && s.size == size)?;
    Some(spares.remove(at).handle)
}

/// Keeps `spare` (its bytes reserved), then gives back the oldest of its
/// device's until they hold at most `bound` bytes.
pub fn keep(state: &State, spare: Spare, bound: u64) {
    let over: Vec<Spare> = {
        let mut spares = lock(&state.tier.spares);
        spares.push(spare);
        let mut held: u64 = spares
            .iter()
            .filter(|s| s.device == spare.device)
            .map(|s| s.size)
            .sum();
        let mut over = Vec::new();
        while held > bound {
            let Some(at) = spares.iter().position(|s| s.device == spare.device) else {
                break;
            };
            let oldest = spares.remove(at);
            held -= oldest.size;
            over.push(oldest);
        }
        over
    };
    over.into_iter().for_each(|spare| give_back(state, spare));
}

/// Bytes of spares on `device`.
pub fn bytes(state: &State, device: Device) -> u64 {
    lock(&state.tier.spares)
        .iter()
        .filter(|s| s.device == device)
        .map(|s| s.size)
        .sum()
}

/// Gives back the oldest spare on `device`; false if it has none.
pub fn release_one(state: &State, device: Device) -> bool {
    let oldest = {
        let mut spares = lock(&state.tier.spares);
        spares
            .iter()
            .position(|s| s.device == device)
            .map(|at| spares.remove(at))
    };
    oldest.map(|spare| give_back(state, spare)).is_some()
}

/// Gives back every spare on `device`; their bytes.
pub fn release_all(state: &State, device: Device) -> u64 {
    let mine: Vec<Spare> = {
        let mut spares = lock(&state.tier.spares);
        let (mine, others) = spares.drain(..).partition(|s| s.device == device);
        *spares = others;
        mine
    };
    mine.into_iter()
        .map(|spare| {
            give_back(state, spare);
            spare.size
        })
        .sum()
}

/// The memory first, then its bytes: the ledger never counts less than the
/// device holds.
fn give_back(state: &State, spare: Spare) {
    backing::release(spare.handle);
    state.ledger.unreserve(spare.device, spare.size);
}
