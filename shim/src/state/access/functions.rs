//! What the shim knows of each launched function: where its parameters lie
//! (asked of CUDA once, on its first launch) and how it recurs. Looked up on
//! every launch, so a thread first asks a small cache of its own; the table
//! behind it is locked only on a thread's first launch of a function.
//! Entries live as long as the process (a job launches a bounded set of
//! functions; past [`MAX_FUNCTIONS`], new ones go unrecorded).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::steps::Recurrence;

pub const MAX_FUNCTIONS: usize = 1 << 16;

/// Where one parameter lies in the launch's argument list: its index is
/// its place in the layout; `offset` and `size` in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub offset: u32,
    pub size: u32,
}

pub struct FunctionInfo {
    /// The parameters, or `None` when CUDA could not say.
    pub params: Option<Box<[Param]>>,
    pub recurrence: Recurrence,
}

/// Tells one process state's table from another's (a forked child's).
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

const CACHED: usize = 64;

thread_local! {
    /// This thread's cache: (table id, function key, entry), by key.
    static CACHE: [Cell<(usize, usize, *const FunctionInfo)>; CACHED] =
        const { [const { Cell::new((0, 0, std::ptr::null())) }; CACHED] };
}

pub struct Functions {
    id: usize,
    table: Mutex<HashMap<usize, &'static FunctionInfo>>,
}

impl Default for Functions {
    fn default() -> Self {
        Self::new()
    }
}

impl Functions {
    pub fn new() -> Self {
        Functions {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            table: Mutex::new(HashMap::new()),
        }
    }

    /// The entry of function `key`; on its first launch, `layout` says
    /// where its parameters are (called with no lock held: it asks CUDA).
    /// `None` once the table is full.
    pub fn get(
        &self,
        key: usize,
        layout: impl FnOnce() -> Option<Box<[Param]>>,
    ) -> Option<&'static FunctionInfo> {
        let slot = (key >> 4) % CACHED;
        let cached = CACHE
            .try_with(|cache| {
                let (id, cached_key, info) = cache[slot].get();
                // SAFETY: entries are leaked, never freed.
                (id == self.id && cached_key == key).then(|| unsafe { &*info })
            })
            .ok()
            .flatten();
        if let Some(info) = cached {
            return Some(info);
        }
        let info = self.lookup(key, layout)?;
        let _ = CACHE.try_with(|cache| cache[slot].set((self.id, key, info)));
        Some(info)
    }

    fn lookup(
        &self,
        key: usize,
        layout: impl FnOnce() -> Option<Box<[Param]>>,
    ) -> Option<&'static FunctionInfo> {
        if let Some(info) = self.locked().get(&key) {
            return Some(info);
        }
        let params = layout();
        let mut table = self.locked();
        if let Some(info) = table.get(&key) {
            return Some(info);
        }
        if table.len() >= MAX_FUNCTIONS {
            return None;
        }
        let info: &'static FunctionInfo = Box::leak(Box::new(FunctionInfo {
            params,
            recurrence: Recurrence::default(),
        }));
        table.insert(key, info);
        Some(info)
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<usize, &'static FunctionInfo>> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Functions launched so far, and how many of them CUDA described.
    pub fn described(&self) -> (usize, usize) {
        let table = self.locked();
        let described = table.values().filter(|info| info.params.is_some()).count();
        (table.len(), described)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_asked_once_per_function() {
        let functions = Functions::new();
        let mut asked = 0;
        let param = [Param { offset: 0, size: 8 }];
        for _ in 0..3 {
            let info = functions
                .get(0x1000, || {
                    asked += 1;
                    Some(param.into())
                })
                .unwrap();
            assert_eq!(info.params.as_deref(), Some(&param[..]));
        }
        assert_eq!(asked, 1);
        // Another thread finds it in the table, without asking again.
        std::thread::scope(|s| {
            s.spawn(|| {
                let info = functions.get(0x1000, || panic!("asked twice")).unwrap();
                assert!(info.params.is_some());
            });
        });
        // Keys that share a cache slot do not mix.
        let other = functions.get(0x1000 + (CACHED << 4), || None).unwrap();
        assert!(other.params.is_none());
        assert!(functions.get(0x1000, || None).unwrap().params.is_some());
        assert_eq!(functions.described(), (2, 1));
        // A forked child's table starts empty.
        let child = Functions::new();
        assert!(child.get(0x1000, || None).unwrap().params.is_none());
    }
}
