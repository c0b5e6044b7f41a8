//! Finding the real CUDA runtime (and driver) inside the process.
//!
//! When the first hook runs, the caller's `libcudart` is already loaded: the
//! caller linked against it. It may not be on the library path at all
//! (PyTorch's lives in site-packages and is found through an RPATH), so it is
//! found among the loaded objects rather than by name. The order:
//! 1. a loaded object whose file name starts with `libcudart.so`, reopened
//!    with `RTLD_NOLOAD` (this never loads anything new);
//! 2. `RTLD_NEXT`, the next definition after the shim in lookup order;
//! 3. `libcudart.so.13`, then `libcudart.so.12`, opened by name.
//!
//! Driver-API symbols (`cu…`) are looked up the same way in `libcuda.so.1`,
//! which is never opened by name: a program that calls the driver has it
//! loaded, and one that does not must not get it loaded by the shim.
//!
//! Symbols are resolved one at a time on first use and cached. A symbol that
//! is missing is an answer (`None`), never a panic: an older runtime lacks
//! newer functions, and the caller decides what to do without them.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};

/// The runtime library that was found, if any, and how.
pub struct RuntimeLibrary {
    /// Path or name it was found under; empty when only `RTLD_NEXT` is used.
    pub name: String,
    library: Option<Library>,
}

const NOT_RESOLVED: usize = 0;
const MISSING: usize = 1;

/// One function of the real runtime, resolved on first use.
pub struct Symbol {
    name: &'static CStr,
    address: AtomicUsize,
}

impl Symbol {
    pub const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            address: AtomicUsize::new(NOT_RESOLVED),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("?")
    }

    /// The function's address, or `None` when the runtime does not have it.
    pub fn get(&self) -> Option<*mut c_void> {
        let mut address = self.address.load(Ordering::Acquire);
        if address == NOT_RESOLVED {
            // Two threads may both resolve; they find the same address.
            address = resolve(self.name).map_or(MISSING, |p| p as usize);
            self.address.store(address, Ordering::Release);
        }
        (address != MISSING).then_some(address as *mut c_void)
    }
}

/// A [`Symbol`] of a known C signature `F` (an `unsafe extern "C" fn`
/// type): resolved on first use, handed out typed, so that no caller
/// converts addresses itself.
pub struct Function<F> {
    symbol: Symbol,
    signature: std::marker::PhantomData<F>,
}

impl<F: Copy> Function<F> {
    pub const fn new(name: &'static CStr) -> Self {
        Self {
            symbol: Symbol::new(name),
            signature: std::marker::PhantomData,
        }
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.symbol.name()
    }

    /// The function of this signature at `address` (another library's
    /// definition of the same name); `None` for a null address.
    pub fn at(address: *mut c_void) -> Option<F> {
        const {
            assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>());
        }
        // SAFETY: as in `get`: `F` is the function pointer type of this
        // name's signature, and the address is that name's definition.
        (!address.is_null())
            .then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
    }

    /// The function, or `None` when the library does not have it.
    pub fn get(&self) -> Option<F> {
        const {
            assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>());
        }
        let address = self.symbol.get()?;
        // SAFETY: `F` is a function pointer type (pointer-sized, checked
        // above) naming the signature the symbol has, as the constructor's
        // caller states by choosing `F`.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
    }
}

/// The real function `name` (runtime or driver), looked up now, uncached.
pub fn lookup(name: &CStr) -> Option<*mut c_void> {
    resolve(name)
}

/// The libraries whose calls the shim reads for operands, by the prefix of
/// their functions' names (longest first) and of their file names.
const LIBRARIES: &[(&str, &str)] = &[
    ("cublasLt", "libcublasLt.so"),
    ("cublas", "libcublas.so"),
    ("cudnn", "libcudnn.so"),
];

/// The file-name prefix of the library defining `name`, if it is one of
/// [`LIBRARIES`] rather than the runtime or driver.
pub fn library_of(name: &str) -> Option<&'static str> {
    LIBRARIES
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, file)| *file)
}

/// `name` in the loaded library whose file name starts with `file`. Found
/// among the loaded objects, since a framework may load it privately
/// (`RTLD_LOCAL`), out of `RTLD_NEXT`'s reach.
fn in_library(file: &str, name: &CStr) -> Option<*mut c_void> {
    let path = loaded_object_named(file)?;
    // SAFETY: RTLD_NOLOAD only takes a reference to a loaded object.
    let library = unsafe { Library::open(Some(&path), RTLD_LAZY | libc::RTLD_NOLOAD) }.ok()?;
    // SAFETY: looking up an address; nothing is called here.
    let address = *unsafe { library.get::<*mut c_void>(name.to_bytes_with_nul()) }.ok()?;
    // The object stays loaded: it was before, and the reference is leaked.
    std::mem::forget(library);
    (!address.is_null()).then_some(address)
}

fn resolve(name: &CStr) -> Option<*mut c_void> {
    if let Some(file) = name.to_str().ok().and_then(library_of) {
        if let Some(address) = in_library(file, name) {
            return Some(address);
        }
        // SAFETY: dlsym with a NUL-terminated name.
        let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        return (!next.is_null()).then_some(next);
    }
    // The runtime's names start with `cuda` (or `__cuda`, for its host stubs).
    let bytes = name.to_bytes();
    let is_driver = !(bytes.starts_with(b"cuda") || bytes.starts_with(b"__cuda"));
    let library = if is_driver {
        driver_library()
    } else {
        runtime_library()
    };
    if let Some(library) = &library.library {
        // SAFETY: looking up an address; nothing is called here.
        if let Ok(symbol) = unsafe { library.get::<*mut c_void>(name.to_bytes_with_nul()) } {
            let address = *symbol;
            if !address.is_null() {
                return Some(address);
            }
        }
    }
    // SAFETY: dlsym with a NUL-terminated name.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!next.is_null()).then_some(next)
}

/// The real runtime, found once per process.
pub fn runtime_library() -> &'static RuntimeLibrary {
    static RUNTIME: OnceLock<RuntimeLibrary> = OnceLock::new();
    RUNTIME.get_or_init(find_runtime)
}

/// The real driver (`libcuda.so.1`), if it is loaded.
pub fn driver_library() -> &'static RuntimeLibrary {
    static DRIVER: OnceLock<RuntimeLibrary> = OnceLock::new();
    DRIVER.get_or_init(|| {
        if let Some(path) = loaded_object_named("libcuda.so.") {
            // SAFETY: RTLD_NOLOAD only takes a reference to a loaded object.
            if let Ok(library) =
                unsafe { Library::open(Some(&path), RTLD_LAZY | libc::RTLD_NOLOAD) }
            {
                return RuntimeLibrary {
                    name: path,
                    library: Some(library),
                };
            }
        }
        RuntimeLibrary {
            name: String::new(),
            library: None,
        }
    })
}

fn find_runtime() -> RuntimeLibrary {
    if let Some(path) = loaded_object_named("libcudart.so") {
        // SAFETY: RTLD_NOLOAD only takes a reference to an object already
        // loaded, so no initialiser runs.
        if let Ok(library) = unsafe { Library::open(Some(&path), RTLD_LAZY | libc::RTLD_NOLOAD) } {
            return RuntimeLibrary {
                name: path,
                library: Some(library),
            };
        }
    }
    // SAFETY: dlsym with a NUL-terminated name.
    if !unsafe { libc::dlsym(libc::RTLD_NEXT, c"cudaMalloc".as_ptr()) }.is_null() {
        return RuntimeLibrary {
            name: String::new(),
            library: None,
        };
    }
    for name in ["libcudart.so.13", "libcudart.so.12"] {
        // SAFETY: loading NVIDIA's runtime runs its initialisers, which is
        // what the caller's own first CUDA call would do.
        if let Ok(library) = unsafe { Library::open(Some(name), RTLD_LAZY | RTLD_LOCAL) } {
            return RuntimeLibrary {
                name: name.to_string(),
                library: Some(library),
            };
        }
    }
    RuntimeLibrary {
        name: String::new(),
        library: None,
    }
}

/// `name` in each loaded runtime other than the one [`runtime_library`]
/// found (a process can load two: a framework's, and an extension's of
/// another CUDA version), for a call the first one does not know.
pub fn in_other_runtimes(name: &CStr) -> Vec<*mut c_void> {
    let primary = runtime_library().name.clone();
    loaded_objects_named("libcudart.so")
        .into_iter()
        .filter(|path| *path != primary)
        .filter_map(|path| {
            // SAFETY: RTLD_NOLOAD only takes a reference to a loaded object.
            let library =
                unsafe { Library::open(Some(&path), RTLD_LAZY | libc::RTLD_NOLOAD) }.ok()?;
            // SAFETY: looking up an address; nothing is called here.
            let address = *unsafe { library.get::<*mut c_void>(name.to_bytes_with_nul()) }.ok()?;
            // The object stays loaded: it was before, and the reference is leaked.
            std::mem::forget(library);
            (!address.is_null()).then_some(address)
        })
        .collect()
}

/// The paths of every loaded object whose file name starts with `prefix`.
fn loaded_objects_named(prefix: &str) -> Vec<String> {
    struct Search<'a> {
        prefix: &'a str,
        found: Vec<String>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `Search` passed below; `info` is valid for the call.
        let search = unsafe { &mut *(data as *mut Search) };
        // SAFETY: as above.
        let name: *const c_char = unsafe { (*info).dlpi_name };
        if name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated name the dynamic linker keeps.
        let path = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        if path
            .rsplit('/')
            .next()
            .unwrap_or("")
            .starts_with(search.prefix)
        {
            search.found.push(path.into_owned());
        }
        0
    }
    let mut search = Search {
        prefix,
        found: Vec::new(),
    };
    // SAFETY: the callback only reads the entries and writes into `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// The path of the first loaded object whose file name starts with `prefix`.
pub fn loaded_object_named(prefix: &str) -> Option<String> {
    loaded_objects_named(prefix).into_iter().next()
}
