//! What the shim knows of each launched function: where its parameters lie
//! (asked of CUDA once, on its first launch), and, per thread, how it
//! recurs. Looked up on every launch, so a thread first asks a cache of its
//! own (which also holds the recurrence); the table behind it is locked
//! only on a thread's first launch of a function (or after another function
//! took its place in the cache, which forgets its recurrence).
//! Entries live as long as the process (a job launches a bounded set of
//! functions; past [`MAX_FUNCTIONS`], new ones go unrecorded).

use rustc_hash::FxHashMap as HashMap;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// The table's generation it was asked in ([`Functions::forget_all`]).
    generation: u64,
}

/// Tells one process state's table from another's (a forked child's).
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// Functions a thread's cache holds, in sets of [`WAYS`] chosen by key: a
/// few hundred distinct kernels make a training step; those that keep
/// their place through a step are enough to find it. A function found moves
/// one place toward the front of its set, and a new one takes the last
/// place, so the functions launched most keep theirs (and their
/// recurrence) when others of their set come and go.
const CACHED: usize = 256;
const WAYS: usize = 4;
const SETS: usize = CACHED / WAYS;

/// One set of a thread's cache: whose entries it holds (the table, and its
/// generation: a set of another is empty), the functions' keys side by side
/// (so that a lookup reads one line), then each way's entry (null once the
/// table is full) and how the function recurs on this thread.
#[repr(C, align(64))]
struct Set {
    table: Cell<usize>,
    generation: Cell<u64>,
    keys: [Cell<usize>; WAYS],
    ways: [Cell<Way>; WAYS],
}

#[derive(Clone, Copy)]
struct Way {
    info: *const FunctionInfo,
    recurrence: Recurrence,
}

const EMPTY_WAY: Way = Way {
    info: std::ptr::null(),
    recurrence: Recurrence::ZERO,
};

thread_local! {
    static CACHE: [Set; SETS] = const {
        [const {
            Set {
                table: Cell::new(0),
                generation: Cell::new(0),
                keys: [const { Cell::new(0) }; WAYS],
                ways: [const { Cell::new(EMPTY_WAY) }; WAYS],
            }
        }; SETS]
    };
}

pub struct Functions {
    id: usize,
    table: Mutex<HashMap<usize, &'static FunctionInfo>>,
    /// Bumped when modules are unloaded: a function's address may then be
    /// another function's, of other parameters, so every entry is asked
    /// again.
    generation: AtomicU64,
    /// Entries made in all (never freed: a thread may still read one).
    made: AtomicUsize,
}

/// Entries made at most over the process's life, however many unloads:
/// past it, new functions go unread.
const MAX_MADE: usize = 4 * MAX_FUNCTIONS;

impl Default for Functions {
    fn default() -> Self {
        Self::new()
    }
}

impl Functions {
    pub fn new() -> Self {
        Functions {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            table: Mutex::new(HashMap::default()),
            generation: AtomicU64::new(0),
            made: AtomicUsize::new(0),
        }
    }

    /// Calls `f` with the entry of function `key` (on its first launch,
    /// `layout` says where its parameters are; it is called with no lock
    /// held, since it asks CUDA) and this thread's record of how it recurs.
    /// The entry is `None` once the table is full; the record is `None`
    /// while the thread is exiting.
    pub fn with<R>(
        &self,
        key: usize,
        layout: impl FnOnce() -> Option<Box<[Param]>>,
        f: impl FnOnce(Option<&'static FunctionInfo>, Option<&mut Recurrence>) -> R,
    ) -> R {
        if key == 0 {
            // No function (a launch CUDA will refuse); 0 also marks a free way.
            return f(self.entry(key, layout), None);
        }
        let generation = self.generation.load(Ordering::Acquire);
        let index = set_of(key);
        // The way holding `key` (moved one place toward the front), or
        // the place a new one takes: the first free, or else the last.
        let found = CACHE.try_with(|cache| {
            let set = &cache[index];
            if set.table.get() != self.id || set.generation.get() != generation {
                set.table.set(self.id);
                set.generation.set(generation);
                for (key, way) in set.keys.iter().zip(&set.ways) {
                    key.set(0);
                    way.set(EMPTY_WAY);
                }
            }
            let keys = &set.keys;
            let Some(way) = keys.iter().position(|k| k.get() == key) else {
                let free = keys.iter().position(|k| k.get() == 0);
                return Err(free.unwrap_or(WAYS - 1));
            };
            if way == 0 {
                return Ok((0, set.ways[0].get()));
            }
            keys[way].swap(&keys[way - 1]);
            set.ways[way].swap(&set.ways[way - 1]);
            Ok((way - 1, set.ways[way - 1].get()))
        });
        let Ok(found) = found else {
            return f(self.entry(key, layout), None);
        };
        let (at, mut way) = match found {
            Ok(found) => found,
            Err(at) => {
                let info = self.entry(key, layout);
                let info = info.map_or(std::ptr::null(), |info| info as *const FunctionInfo);
                let way = Way {
                    info,
                    recurrence: Recurrence::ZERO,
                };
                (at, way)
            }
        };
        // SAFETY: entries are leaked, never freed.
        let info = (!way.info.is_null()).then(|| unsafe { &*way.info });
        let result = f(info, Some(&mut way.recurrence));
        let _ = CACHE.try_with(|cache| {
            let set = &cache[index];
            set.keys[at].set(key);
            set.ways[at].set(way);
        });
        result
    }

    /// The entry of function `key`, made on its first launch or read
    /// (`layout` asks CUDA, with no lock held); `None` once the table is
    /// full. This thread's cache is left as it is.
    pub fn entry(
        &self,
        key: usize,
        layout: impl FnOnce() -> Option<Box<[Param]>>,
    ) -> Option<&'static FunctionInfo> {
        let current = |info: &&&'static FunctionInfo| {
            info.generation == self.generation.load(Ordering::Acquire)
        };
        if let Some(info) = self.locked().get(&key).filter(current) {
            return Some(info);
        }
        let generation = self.generation.load(Ordering::Acquire);
        let params = layout();
        let mut table = self.locked();
        if let Some(info) = table.get(&key).filter(current) {
            return Some(info);
        }
        let full = !table.contains_key(&key) && table.len() >= MAX_FUNCTIONS;
        if full || self.made.fetch_add(1, Ordering::Relaxed) >= MAX_MADE {
            return None;
        }
        let info: &'static FunctionInfo = Box::leak(Box::new(FunctionInfo { params, generation }));
        table.insert(key, info);
        Some(info)
    }

    /// Modules were unloaded: every function is asked about again at its
    /// next launch. The entries stay until then, so that what was launched
    /// is still counted (CUDA unloads every module as the process exits,
    /// before the exit trace is written).
    pub fn forget_all(&self) {
        let _table = self.locked();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<usize, &'static FunctionInfo>> {
        crate::state::lock(&self.table)
    }

    /// Functions launched so far, and how many of them CUDA described (by
    /// their latest description).
    pub fn described(&self) -> (usize, usize) {
        let table = self.locked();
        let described = table.values().filter(|info| info.params.is_some()).count();
        (table.len(), described)
    }
}

/// The cache set of `key`. Fibonacci hashing: neighbouring keys (a
/// module's functions lie side by side) land far apart.
fn set_of(key: usize) -> usize {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - SETS.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::super::steps::{Steps, SHORTEST};
    use super::*;

    fn params_of(
        functions: &Functions,
        key: usize,
        layout: Option<&[Param]>,
    ) -> Option<Vec<Param>> {
        functions.with(
            key,
            || layout.map(Into::into),
            |info, _| info.and_then(|info| info.params.as_deref().map(<[Param]>::to_vec)),
        )
    }

    #[test]
    fn a_layout_is_asked_once_per_function() {
        let functions = Functions::new();
        let mut asked = 0;
        let param = [Param { offset: 0, size: 8 }];
        for _ in 0..3 {
            let found = functions.with(
                0x1000,
                || {
                    asked += 1;
                    Some(param.into())
                },
                |info, recurrence| {
                    assert!(recurrence.is_some());
                    info.unwrap().params.as_deref().map(<[Param]>::to_vec)
                },
            );
            assert_eq!(found.as_deref(), Some(&param[..]));
        }
        assert_eq!(asked, 1);
        // Another thread finds it in the table, without asking again.
        std::thread::scope(|s| {
            s.spawn(|| {
                let found =
                    functions.with(0x1000, || panic!("asked twice"), |info, _| info.is_some());
                assert!(found);
            });
        });
        // Other keys do not mix with it, neighbours or not.
        assert_eq!(params_of(&functions, 0x1001, None), None);
        assert_eq!(
            params_of(&functions, 0x1000, None).as_deref(),
            Some(&param[..])
        );
        assert_eq!(functions.described(), (2, 1));
        // After an unload, the same address is asked about again; what was
        // launched before is still counted.
        functions.forget_all();
        assert_eq!(functions.described(), (2, 1));
        let other = [Param { offset: 0, size: 4 }];
        assert_eq!(
            params_of(&functions, 0x1000, Some(&other)).as_deref(),
            Some(&other[..])
        );
        // A forked child's table starts empty.
        let child = Functions::new();
        assert_eq!(params_of(&child, 0x1000, None), None);
    }

    #[test]
    fn no_function_is_never_taken_for_a_cached_one() {
        let functions = Functions::new();
        let ten = vec![Param { offset: 0, size: 8 }; 10];
        for key in (0x9000..).step_by(16).take(4 * CACHED) {
            assert!(params_of(&functions, key, Some(&ten)).is_some());
        }
        functions.forget_all();
        assert_eq!(params_of(&functions, 0, None), None);
    }

    #[test]
    fn functions_of_one_cache_set_keep_their_recurrence() {
        let functions = Functions::new();
        let steps = Steps::new();
        let set = set_of(0x7000);
        let keys: Vec<usize> = (0x7000..)
            .step_by(16)
            .filter(|key| set_of(*key) == set)
            .take(WAYS + 1)
            .collect();
        // Whether the launch found its record of recurrence empty.
        let fresh = |key: usize| {
            functions.with(
                key,
                || None,
                |_, recurrence| {
                    let recurrence = recurrence.unwrap();
                    let fresh = recurrence.is_fresh();
                    steps.launch(key, Some(recurrence), SHORTEST);
                    fresh
                },
            )
        };
        for round in 0..5 {
            for key in &keys[..WAYS] {
                assert_eq!(fresh(*key), round == 0, "{key:#x} in round {round}");
            }
        }
        // A fifth comes and goes: it takes the last place, the others keep theirs.
        assert!(fresh(keys[WAYS]));
        let kept = keys[..WAYS].iter().filter(|key| !fresh(**key)).count();
        assert_eq!(kept, WAYS - 1);
    }
}
