//! Kernel launches, through every path a job takes (the runtime's calls and
//! host stubs, the driver's, graphs), and the math library calls whose
//! kernels hide their operands. Each is counted in the process's registry
//! slot; its parameters are read for pointers into live blocks (where they
//! lie is asked of CUDA once per function), and the blocks named get the
//! use in their profile ([`crate::state::access`]). The launch itself goes
//! to CUDA unchanged: reading fails safe, a launch the shim cannot read is
//! counted as such and made all the same.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};

use cudart_sys::{cudaError_t, CUfunction};
use vramshare_common::event::Api;

use crate::cuda::host_costs;
use crate::cuda::real;
use crate::state::access::functions::Param;
use crate::state::access::{Launch, Named, Naming};
use crate::state::{state, Attribution, State};

use super::tier;
use super::tier::Reads;

/// What a launch names its function by, which says how to ask CUDA for the
/// function's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The runtime's host stub address (`cudaLaunchKernel`'s `func`).
    HostStub,
    /// A `cudaKernel_t`, which is a driver `CUkernel` (`__cudaLaunchKernel`).
    Kernel,
    /// A driver `CUfunction` (or a `CUkernel` passed as one).
    Function,
    /// An executable graph: it names what its kernels named when it was
    /// captured ([`crate::state::access::graphs`]).
    Graph,
}

/// Where a launch's arguments are.
#[derive(Clone, Copy, Debug)]
pub enum Params {
    /// One pointer per parameter (`kernelParams`, `args`).
    List(*mut *mut c_void),
    /// The driver's `extra`: a packed buffer and its size.
    Extra(*mut *mut c_void),
    None,
}

pub struct Launched {
    pub entry: Entry,
    pub key: usize,
    pub params: Params,
    pub stream: usize,
}

/// Parameters asked of a function at most, and bytes read of one.
const MAX_PARAMS: usize = 1024;
const MAX_PARAM_BYTES: usize = 32 << 10;

/// Inside a library call on this thread: the stream its first kernel launch
/// used, once one did.
#[derive(Clone, Copy)]
enum Library {
    Outside,
    Inside(Option<usize>),
}

thread_local! {
    static IN_LIBRARY: Cell<Library> = const { Cell::new(Library::Outside) };
    /// Inside a library call ordered on a stream (its own, or its
    /// handle's): that stream, with the call's API, and the blocks its
    /// operands name, until its first kernel launch; a launch on another
    /// stream (the handle's stream not the one last seen set) is ordered
    /// after the blocks' last uses there too.
    static ORDERED_ON: RefCell<Option<(Api, usize, Vec<usize>)>> = const { RefCell::new(None) };
}

/// Leaves the library call however it ends (a panic included).
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        let _ = IN_LIBRARY.try_with(|inside| inside.set(Library::Outside));
        let _ = ORDERED_ON.try_with(|ordered| ordered.borrow_mut().take());
    }
}

/// The stream of a launch configuration (`cudaLaunchConfig_t` and
/// `CUlaunchConfig` both hold it at byte 32, after the grid, the block and
/// the shared memory size).
///
/// # Safety
/// `config` is null or the caller's launch configuration.
pub unsafe fn config_stream(config: *const c_void) -> usize {
    if config.is_null() {
        return 0;
    }
    // SAFETY: a launch configuration is at least 40 bytes, its stream at 32.
    unsafe { std::ptr::read_unaligned((config as *const u8).add(32) as *const usize) }
}

/// A launch through `api`: counted, its operands read, then made by `real`.
///
/// # Safety
/// `launched` describes the caller's own launch arguments.
pub unsafe fn launch(
    api: Api,
    launched: Launched,
    real: impl FnOnce() -> cudaError_t,
) -> cudaError_t {
    let state = state();
    let library = IN_LIBRARY
        .try_with(|inside| inside.get())
        .unwrap_or(Library::Outside);
    let mut names = Named::default();
    let how = match library {
        // The library call's own operands name its blocks: its kernels'
        // parameters are not read too (that would count each use twice).
        Library::Inside(seen) => {
            if seen.is_none() {
                let first = Library::Inside(Some(launched.stream));
                let _ = IN_LIBRARY.try_with(|inside| inside.set(first));
            }
            Attribution::InLibrary
        }
        // SAFETY: as the caller promises.
        Library::Outside => host_costs::timed(&host_costs::HOST_COSTS.read_ns, || unsafe {
            attribute(state, &launched, &mut names)
        }),
    };
    state.count_launch(api, how);
    if !tier::active(state) {
        tier::log_use(state, names.blocks());
        return real();
    }
    // A graph's launch runs every kernel captured in it: its blocks may be
    // read many times over.
    let reads = if launched.entry == Entry::Graph {
        Reads::Many
    } else {
        Reads::Once
    };
    tier::fetch(state, api, names.blocks(), reads);
    let _inside = tier::enter(state);
    if let Library::Inside(None) = library {
        // A library call's first kernel: on the stream its call was
        // ordered on, or ordered here.
        let ordered = ORDERED_ON.try_with(|ordered| ordered.borrow_mut().take());
        if let Ok(Some((call, on, operands))) = ordered {
            if !tier::uses::same_stream(call, on, api, launched.stream) {
                tier::uses::order(state, api, &operands, Some(launched.stream));
            }
        }
    }
    let stream = Some(launched.stream);
    let (words, overflowed) = names.words();
    let touched = tier::uses::touched(state, api, words, overflowed);
    // A graph's kernels were read when it was captured, not all of them.
    if how == Attribution::Undecoded || overflowed || launched.entry == Entry::Graph {
        tier::uses::opaque(state, api);
    }
    tier::uses::order(state, api, &touched, stream);
    let rc = real();
    tier::uses::used(state, api, &touched, stream);
    tier::faults::returned(state, api, rc, &touched);
    if launched.entry == Entry::Graph {
        tier::captured::launched(state, api, launched.key, launched.stream);
    }
    rc
}

/// Reads the launch's parameters for blocks; what came of it. A launch on
/// a stream being captured is recorded for its graph instead.
unsafe fn attribute(state: &State, launched: &Launched, names: &mut Named) -> Attribution {
    let entry = launched.entry;
    let ask = || layout(entry, launched.key);
    state
        .access
        .functions
        .with(launched.key, ask, |info, recurrence| {
            if entry == Entry::Graph {
                return graph_launch(state, launched, recurrence, names);
            }
            let layout = info.and_then(|info| info.params.as_deref());
            let readable = match launched.params {
                Params::List(args) => args.is_null() || layout.is_some(),
                Params::Extra(_) | Params::None => true,
            };
            // SAFETY: the caller's arguments, laid out as the function's
            // parameters are (or the driver's `extra`).
            let read =
                |naming: &mut Naming| unsafe { read_params(launched.params, layout, naming) };
            let kernel = (launched.key, Launch::Kernel);
            let named = state.access.use_or_capture(
                &state.ledger,
                kernel,
                recurrence,
                launched.stream,
                read,
                names,
            );
            match (readable, named) {
                (false, _) => Attribution::Undecoded,
                (true, 0) => Attribution::Unnamed,
                (true, _) => Attribution::Named,
            }
        })
}

/// A launch of an executable graph: the blocks its kernels named while it
/// was captured (undecoded if it was not captured here).
fn graph_launch(
    state: &State,
    launched: &Launched,
    recurrence: Option<&mut crate::state::access::steps::Recurrence>,
    names: &mut Named,
) -> Attribution {
    let blocks = state.access.graphs.blocks_of(launched.key);
    let stream = launched.stream as u64;
    let named = state.access.launch(
        &state.ledger,
        (launched.key, Launch::Graph),
        recurrence,
        stream,
        |naming| {
            for block in blocks.iter().flat_map(|blocks| blocks.iter()) {
                naming.word(*block as u64);
            }
        },
        names,
    );
    match (blocks, named) {
        (None, _) => Attribution::Undecoded,
        (Some(_), 0) => Attribution::Unnamed,
        (Some(_), _) => Attribution::Named,
    }
}

/// Feeds the arguments of a launch of function `key` to `naming`, as its
/// layout says they lie; the layout is asked of CUDA on the function's
/// first launch or read, and then kept.
///
/// # Safety
/// `params` are readable arguments of a launch of that function.
pub(super) unsafe fn read_arguments(entry: Entry, key: usize, params: Params, naming: &mut Naming) {
    let functions = &state().access.functions;
    let layout = functions
        .entry(key, || layout(entry, key))
        .and_then(|info| info.params.as_deref());
    // SAFETY: as the caller promises.
    unsafe { read_params(params, layout, naming) }
}

/// Feeds `params` to `naming`: an argument list by `layout` (nothing is
/// read without one), or the driver's packed `extra`.
///
/// # Safety
/// A list holds one readable pointer per parameter of `layout`; `extra`
/// is ended by CU_LAUNCH_PARAM_END.
unsafe fn read_params(params: Params, layout: Option<&[Param]>, naming: &mut Naming) {
    match (params, layout) {
        // SAFETY: as the caller promises.
        (Params::List(args), Some(layout)) if !args.is_null() => unsafe {
            read_list(args, layout, naming)
        },
        // SAFETY: as the caller promises.
        (Params::Extra(extra), _) if !extra.is_null() => unsafe { read_extra(extra, naming) },
        _ => {}
    }
}

/// # Safety
/// `args` holds one readable pointer per parameter of `layout`.
unsafe fn read_list(args: *mut *mut c_void, layout: &[Param], naming: &mut Naming) {
    for (index, param) in layout.iter().enumerate() {
        // SAFETY: one entry per parameter.
        let arg = unsafe { *args.add(index) };
        if !arg.is_null() {
            let bytes = (param.size as usize).min(MAX_PARAM_BYTES);
            // SAFETY: the parameter's value, `size` bytes, in the caller's memory.
            unsafe { naming.words(arg as *const u8, bytes) };
        }
    }
}

/// # Safety
/// `extra` is the driver's list of (key, value) pairs, ended by 0.
unsafe fn read_extra(extra: *mut *mut c_void, naming: &mut Naming) {
    const BUFFER_POINTER: usize = 1;
    const BUFFER_SIZE: usize = 2;
    let (mut buffer, mut size) = (std::ptr::null::<u8>(), 0usize);
    for pair in 0..8 {
        // SAFETY: entries up to the end marker, which has no value after it.
        let key = unsafe { *extra.add(2 * pair) } as usize;
        if key != BUFFER_POINTER && key != BUFFER_SIZE {
            break;
        }
        // SAFETY: a key other than the end marker is followed by its value.
        let value = unsafe { *extra.add(2 * pair + 1) };
        match key {
            BUFFER_POINTER => buffer = value as *const u8,
            // SAFETY: the size's value points to a size_t.
            _ if !value.is_null() => size = unsafe { *(value as *const usize) },
            _ => {}
        }
    }
    if !buffer.is_null() {
        // SAFETY: the caller's packed parameters, `size` bytes.
        unsafe { naming.words(buffer, size.min(MAX_PARAM_BYTES)) };
    }
}

/// The parameters of a function, asked of CUDA: the driver first (its calls
/// leave no error behind), the runtime where the driver cannot say.
fn layout(entry: Entry, key: usize) -> Option<Box<[Param]>> {
    let handle = key as *mut c_void;
    // SAFETY: each asks CUDA about the caller's own function handle.
    let driver_function =
        |f: CUfunction| ask(|i, o, s| unsafe { real::cuFuncGetParamInfo(f, i, o, s) });
    // SAFETY: as above.
    let driver_kernel = || ask(|i, o, s| unsafe { real::cuKernelGetParamInfo(handle, i, o, s) });
    match entry {
        // A CUkernel may be launched as a CUfunction, but a CUfunction is no
        // CUkernel: only the function's own query is asked.
        Entry::Function => driver_function(handle),
        Entry::Kernel => driver_kernel().or_else(|| runtime_layout(key)),
        Entry::HostStub => {
            let mut function: CUfunction = std::ptr::null_mut();
            let found = leaving_no_error(|| {
                // SAFETY: an out pointer we own, and the caller's stub.
                unsafe { real::cudaGetFuncBySymbol(&mut function, handle) }
            });
            found
                .and_then(|_| (!function.is_null()).then(|| driver_function(function)))
                .flatten()
                .or_else(|| runtime_layout(key))
        }
        // A graph's launch names what was captured into it.
        Entry::Graph => None,
    }
}

fn runtime_layout(key: usize) -> Option<Box<[Param]>> {
    let mut layout = None;
    leaving_no_error(|| {
        // SAFETY: asks the runtime about the caller's function.
        layout =
            ask(|i, o, s| unsafe { real::cudaFuncGetParamInfo(key as *const c_void, i, o, s) });
        if layout.is_some() {
            0
        } else {
            1
        }
    });
    layout
}

/// Runs a runtime query `call` only if the runtime holds no error of the
/// job's (which the job has yet to read with `cudaGetLastError`), and
/// clears the error the query leaves (asking for parameters one by one ends
/// with a refusal), so the job never sees it. `Some` if the query succeeded.
fn leaving_no_error(call: impl FnOnce() -> c_int) -> Option<()> {
    // SAFETY: no arguments; reads the runtime's last error without clearing it.
    if unsafe { real::cudaPeekAtLastError() } != 0 {
        return None;
    }
    let rc = call();
    // SAFETY: no arguments; reads, then clears, what the query left.
    if unsafe { real::cudaPeekAtLastError() } != 0 {
        // SAFETY: as above.
        unsafe { real::cudaGetLastError() };
    }
    (rc == 0).then_some(())
}

/// Asks a parameter-info call for each parameter in turn until it refuses.
/// A layout CUDA could not have made (parameters overlapping or out of
/// order, or past the 32,764 bytes a launch may pass) is not used.
fn ask(info: impl Fn(usize, *mut usize, *mut usize) -> c_int) -> Option<Box<[Param]>> {
    const MAX_ARGUMENT_BYTES: usize = 32_764;
    let mut params = Vec::new();
    let mut end = 0usize;
    for index in 0..MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        if info(index, &mut offset, &mut size) != 0 {
            break;
        }
        if offset < end || offset.saturating_add(size) > MAX_ARGUMENT_BYTES {
            return None;
        }
        end = offset + size;
        params.push(Param {
            offset: offset as u32,
            size: size as u32,
        });
    }
    (!params.is_empty()).then(|| params.into_boxed_slice())
}

/// A library call through `api` with these operand pointers (and stream,
/// when the call names one), which `reads` them so: made by `real` as if
/// from outside the shim, so that its own launches are handled as the
/// job's; then its operands give the blocks it used.
pub fn library_call(
    api: Api,
    operands: &[*const c_void],
    stream: Option<usize>,
    reads: Reads,
    real: impl FnOnce() -> c_int,
) -> c_int {
    let outer = IN_LIBRARY.try_with(|inside| inside.get()).ok();
    let Some(Library::Outside) = outer else {
        // Inside another library call (cuBLAS calling cuBLASLt): that call
        // reads the operands.
        return real::outside_hook(real);
    };
    let state = state();
    fetch_operands(state, api, operands, reads);
    let inside = tier::enter(state);
    let words: Vec<u64> = operands.iter().map(|operand| *operand as u64).collect();
    let touched = tier::uses::touched(state, api, &words, false);
    tier::uses::order(state, api, &touched, stream);
    if let Some(on) = stream {
        let _ = ORDERED_ON
            .try_with(|ordered| *ordered.borrow_mut() = Some((api, on, touched.to_vec())));
    }
    let _ = IN_LIBRARY.try_with(|inside| inside.set(Library::Inside(None)));
    let leave = Leave;
    let rc = real::outside_hook(real);
    let inner = match IN_LIBRARY.try_with(|inside| inside.get()) {
        Ok(Library::Inside(Some(stream))) => Some(stream),
        _ => None,
    };
    // Its work was where its first kernel ran, if the shim saw one.
    tier::uses::used(state, api, &touched, inner.or(stream));
    tier::faults::returned(state, api, rc, &touched);
    drop(inside);
    drop(leave);
    let operands = operands.iter().map(|operand| *operand as u64);
    name_operands(
        state,
        (api, Launch::Library),
        operands,
        stream.or(inner).unwrap_or(0),
        &mut Named::default(),
    );
    rc
}

/// Before a library call: its operands in host memory come onto the
/// device, as a launch's do (the call's use is made after it returns).
fn fetch_operands(state: &'static State, api: Api, operands: &[*const c_void], reads: Reads) {
    // Where uses are recorded, every use counts, moves or not; and once a
    // block has come in, each use of one on the device counts towards how
    // many it serves a trip (`tier::once`).
    let idle = state
        .tier
        .bytes_in_host
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0;
    if idle && !tier::once::counting(state) && !tier::ahead::recording(state) {
        return;
    }
    let read = |naming: &mut Naming| {
        operands
            .iter()
            .for_each(|operand| naming.word(*operand as u64))
    };
    let named = state.access.blocks_named(&state.ledger, read);
    tier::fetch(state, api, &named, reads);
}

/// A use by `api` (a library call, a copy) on `stream` of the blocks its
/// operand pointers point into, counted by whether it named any.
fn name_operands(
    state: &State,
    (api, kind): (Api, Launch),
    operands: impl Iterator<Item = u64>,
    stream: usize,
    names: &mut Named,
) {
    let read = |naming: &mut Naming| operands.for_each(|operand| naming.word(operand));
    let key = (api as usize, kind);
    let named = state
        .access
        .use_or_capture(&state.ledger, key, None, stream, read, names);
    let how = if named > 0 {
        Attribution::Named
    } else {
        Attribution::Unnamed
    };
    state.count_launch(api, how);
}

/// A copy or memset through `api` with these operand pointers (device
/// addresses, or host memory, which names nothing) on `stream`: its
/// operands give the blocks it used; then `real` makes it, inside the hook
/// (what CUDA calls meanwhile passes through).
pub fn copy_call(api: Api, operands: &[u64], stream: usize, real: impl FnOnce() -> c_int) -> c_int {
    let state = state();
    let inside = IN_LIBRARY.try_with(|inside| inside.get()).ok();
    if let Some(Library::Inside(_)) = inside {
        // A library's own copy (a workspace cleared, say): the library
        // call's operands name what it uses.
        state.count_launch(api, Attribution::InLibrary);
        return real();
    }
    let mut names = Named::default();
    let words = operands.iter().copied();
    name_operands(state, (api, Launch::Copy), words, stream, &mut names);
    tier::fetch(state, api, names.blocks(), Reads::Once);
    let _inside = tier::enter(state);
    let touched = tier::uses::touched(state, api, operands, false);
    tier::uses::order(state, api, &touched, Some(stream));
    let rc = real();
    tier::uses::used(state, api, &touched, Some(stream));
    tier::faults::returned(state, api, rc, &touched);
    rc
}
