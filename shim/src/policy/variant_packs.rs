//! The operands of a cuDNN graph's execution (`cudnnBackendExecute`) are in
//! its variant pack: the data pointers and the workspace the caller set on
//! it. cuDNN 9 does not give the data pointers back
//! (`cudnnBackendGetAttribute` refuses them, measured on the H200), so each
//! pack's pointers are recorded as they are set, and read at its execution.

use std::ffi::{c_int, c_void};

use crate::cuda::real;
use crate::state::{lock, State, VariantPack};

/// `CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS`, `…_WORKSPACE`, `CUDNN_TYPE_VOID_PTR`.
const DATA_POINTERS: c_int = 1001;
const WORKSPACE: c_int = 1003;
const VOID_PTR: c_int = 6;

/// The most pointers read of one pack, and the most packs recorded at once
/// (a framework makes one per execution and destroys it after; handles are
/// reused, so the record stays small; past the bound it starts again).
const MAX_POINTERS: usize = 64;
const MAX_PACKS: usize = 4096;

/// Before `cudnnBackendSetAttribute(descriptor, name, kind, count,
/// elements)`: where it sets a variant pack's pointers, they are recorded.
/// A descriptor of another kind never has these attributes set.
///
/// # Safety
/// `elements` holds `count` elements of `kind`, as cuDNN requires.
pub unsafe fn set(
    state: &State,
    descriptor: *mut c_void,
    name: c_int,
    kind: c_int,
    count: i64,
    elements: *const c_void,
) {
    if kind != VOID_PTR || elements.is_null() || !(name == DATA_POINTERS || name == WORKSPACE) {
        return;
    }
    let count = count.clamp(0, MAX_POINTERS as i64) as usize;
    // SAFETY: as the caller promises, `count` pointers (at most the bound).
    let pointers = unsafe { std::slice::from_raw_parts(elements as *const usize, count) };
    let mut packs = lock(&state.variant_packs);
    if packs.len() >= MAX_PACKS && !packs.contains_key(&(descriptor as usize)) {
        packs.clear();
    }
    let pack = packs.entry(descriptor as usize).or_default();
    if name == DATA_POINTERS {
        pack.data = pointers.to_vec();
    } else {
        pack.workspace = pointers.first().copied().unwrap_or(0);
    }
}

/// The data pointers and workspace of the variant pack `pack`: as they
/// were set, else what cuDNN gives back.
pub fn pointers(state: &State, pack: *mut c_void) -> Vec<*const c_void> {
    let recorded = lock(&state.variant_packs).get(&(pack as usize)).cloned();
    let VariantPack { data, workspace } = recorded.unwrap_or_else(|| asked(pack));
    data.into_iter()
        .chain((workspace != 0).then_some(workspace))
        .map(|pointer| pointer as *const c_void)
        .collect()
}

/// What cuDNN gives back of a pack's pointers (a pack set before the shim
/// was loaded, or past the record's bound): its workspace, at least.
fn asked(pack: *mut c_void) -> VariantPack {
    let mut data = vec![0usize; MAX_POINTERS];
    let mut count = 0i64;
    // SAFETY: asks for at most MAX_POINTERS pointers into a buffer of as many.
    let rc = unsafe {
        real::cudnnBackendGetAttribute(
            pack,
            DATA_POINTERS,
            VOID_PTR,
            MAX_POINTERS as i64,
            &mut count,
            data.as_mut_ptr().cast(),
        )
    };
    data.truncate(if rc == 0 {
        count.clamp(0, MAX_POINTERS as i64) as usize
    } else {
        0
    });
    let mut workspace = 0usize;
    // SAFETY: one pointer into a place for one.
    let rc = unsafe {
        real::cudnnBackendGetAttribute(
            pack,
            WORKSPACE,
            VOID_PTR,
            1,
            &mut count,
            (&mut workspace as *mut usize).cast(),
        )
    };
    if rc != 0 {
        workspace = 0;
    }
    VariantPack { data, workspace }
}
