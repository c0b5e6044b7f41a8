//! Keeps a cut-short shared file from killing the process that maps it.
//!
//! A page of a shared mapping whose file was truncated (by a careless
//! `: > registry`, say), or that a full filesystem cannot back, raises
//! SIGBUS on access, and the kernel's default for SIGBUS ends the process:
//! a training job would die of a file that only holds statistics. The
//! shared files are made with their space reserved, so a full filesystem
//! cannot fault them; truncation can be neither prevented nor detected
//! ahead of an access. So the mapped ranges of the shared files are
//! registered here, and a SIGBUS handler replaces a faulting page inside
//! one of them with a private zeroed page and lets the access run again.
//! The data of that page was lost with the truncation; [`pages_lost`]
//! tells the process so, to say it once. Any other SIGBUS goes to the
//! handler that was installed before this one, or to the default.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Ranges guarded at once: the three shared files, a few times over (a
/// forked child maps them again; the command maps them for each look).
const RANGES: usize = 64;

/// `(start, len)` of each guarded range; `start == 0` marks a free entry.
static STARTS: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static LENS: [AtomicUsize; RANGES] = [const { AtomicUsize::new(0) }; RANGES];
static LOST: AtomicBool = AtomicBool::new(false);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();
/// Set while a SIGBUS is handed to the handler installed before this one.
static FORWARDING: AtomicBool = AtomicBool::new(false);
/// The SIGBUS disposition found when the handler was installed, written
/// once before the handler can run.
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

/// A guarded range; dropping it ends the guard (before the range is unmapped).
#[derive(Debug)]
pub struct Registration {
    index: Option<usize>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            LENS[index].store(0, Ordering::Release);
            STARTS[index].store(0, Ordering::Release);
        }
    }
}

/// Guards `len` bytes mapped at `start`. With every entry taken, the range
/// goes unguarded (the process is as it would be without vramshare's
/// guard), which the registration says by holding no entry.
pub fn guard(start: *const u8, len: usize) -> Registration {
    INSTALL.call_once(install);
    let start = start as usize;
    if start == 0 || len == 0 {
        return Registration { index: None };
    }
    for index in 0..RANGES {
        // The length is set before the start is, and cleared after it, so a
        // handler that sees a start also sees its length (or 0: no match).
        if STARTS[index]
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            LENS[index].store(len, Ordering::Release);
            STARTS[index].store(start, Ordering::Release);
            return Registration { index: Some(index) };
        }
    }
    Registration { index: None }
}

/// Whether a page of a shared file was found cut short and replaced by a
/// private one since the last call (so the process's view of that file is
/// no longer shared in full).
pub fn pages_lost() -> bool {
    // A load first: this is asked at every traced call, and is almost always no.
    LOST.load(Ordering::Relaxed) && LOST.swap(false, Ordering::AcqRel)
}

/// Reads the first and last byte of `value` (in a shared file), so that a
/// page of it that was cut short is replaced now, and [`pages_lost`] says
/// so before its contents are used.
pub fn touch<T>(value: &T) {
    let start = value as *const T as *const u8;
    let len = std::mem::size_of::<T>();
    if len > 0 {
        // SAFETY: both bytes lie inside `value`, which is a valid reference.
        unsafe {
            std::ptr::read_volatile(start);
            std::ptr::read_volatile(start.add(len - 1));
        }
    }
}

fn guarded(address: usize) -> bool {
    (0..RANGES).any(|index| {
        let start = STARTS[index].load(Ordering::Acquire);
        let len = LENS[index].load(Ordering::Acquire);
        start != 0 && start != usize::MAX && address >= start && address - start < len
    })
}

fn install() {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // SAFETY: a zeroed sigaction is a valid "default" disposition; the
    // previous one is written before ours is installed, and read only by
    // the handler after that.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let previous = &raw mut PREVIOUS;
        libc::sigaction(libc::SIGBUS, std::ptr::null(), (*previous).as_mut_ptr());
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR && guarded(address) {
        let page = PAGE.load(Ordering::Relaxed);
        // SAFETY: mmap is a plain system call (safe in a handler); it
        // replaces one page of a range this process mapped for a shared
        // file, which nothing but atomics and checked reads touch.
        let replaced = unsafe {
            libc::mmap(
                (address & !(page - 1)) as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            LOST.store(true, Ordering::Release);
            return;
        }
    }
    // Not ours: as if this handler were not there. A handler installed
    // after this one that hands SIGBUS back to it ends up here again, from
    // the one before: then the default, never a loop.
    // SAFETY: PREVIOUS was written before this handler was installed.
    let previous = unsafe { &*(&raw const PREVIOUS).cast::<libc::sigaction>() };
    let handler = previous.sa_sigaction;
    let sent = code <= 0; // by kill, sigqueue or tgkill, not by a fault
    if handler == libc::SIG_IGN && sent {
        return;
    }
    if handler != libc::SIG_DFL
        && handler != libc::SIG_IGN
        && !FORWARDING.swap(true, Ordering::AcqRel)
    {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the process installed this function as an SA_SIGINFO handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(signal, info, context);
        } else {
            // SAFETY: the process installed this function as a plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(signal);
        }
        FORWARDING.store(false, Ordering::Release);
        return;
    }
    // The default: put it back. A fault then happens again as the handler
    // returns, with its own address and code, and ends the process as it
    // would have; a signal sent is raised again, delivered on return.
    // SAFETY: sigaction and raise are async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
        if sent {
            libc::raise(libc::SIGBUS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_truncated_shared_file_reads_as_zeros_instead_of_killing() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 3 * 4096]).unwrap();
        // SAFETY: a shared mapping of a file this test owns.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        let _guard = guard(map.as_ptr(), map.len());
        file.set_len(4096).unwrap();
        assert_eq!(map[0], 7, "the page still in the file is shared as before");
        map[2 * 4096 + 5] = 1;
        assert_eq!(map[2 * 4096 + 4], 0, "the cut page reads as zeros");
        assert_eq!(map[2 * 4096 + 5], 1, "and takes writes");
        assert!(pages_lost());
        assert!(!pages_lost(), "said once");
    }

    /// Runs `scenario` of [`child`] in a fresh process of this test binary
    /// (the handler is installed once per process, so each needs its own).
    fn in_child(scenario: &str) -> std::process::ExitStatus {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fault_guard::tests::child", "--test-threads=1"])
            .env("FAULT_GUARD_CHILD", scenario)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    static HANDLED: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn count(_: libc::c_int) {
        HANDLED.fetch_add(1, Ordering::SeqCst);
    }

    /// The scenarios, each in a process of its own; a plain test run passes.
    #[test]
    fn child() {
        let Ok(scenario) = std::env::var("FAULT_GUARD_CHILD") else {
            return;
        };
        let sent = || {
            // SAFETY: signalling this thread, so that it is handled before
            // raise returns.
            unsafe { libc::raise(libc::SIGBUS) };
        };
        // SAFETY: plain dispositions and handlers, set before the guard.
        match scenario.as_str() {
            "ignored" => unsafe {
                libc::signal(libc::SIGBUS, libc::SIG_IGN);
                let _ = guard(&0u8, 1);
                sent();
            },
            // SAFETY: plain dispositions and handlers, set before the guard.
            "chained" => unsafe {
                libc::signal(libc::SIGBUS, count as *const () as libc::sighandler_t);
                let _ = guard(&0u8, 1);
                sent();
                assert_eq!(HANDLED.load(Ordering::SeqCst), 1);
            },
            "unguarded fault" => {
                let _ = guard(&0u8, 1);
                let mut file = tempfile::tempfile().unwrap();
                file.write_all(&[7u8; 2 * 4096]).unwrap();
                // SAFETY: a shared mapping of a file this test owns.
                let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
                file.set_len(0).unwrap();
                // SAFETY: reads a byte of the mapping, now past the file's end.
                let _ = unsafe { std::ptr::read_volatile(&map[4096]) };
            }
            other => panic!("no scenario {other}"),
        }
    }

    #[test]
    fn other_sigbus_is_as_if_the_guard_were_not_there() {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            in_child("ignored").success(),
            "an ignored SIGBUS stays ignored"
        );
        assert!(in_child("chained").success(), "the job's own handler runs");
        assert_eq!(
            in_child("unguarded fault").signal(),
            Some(libc::SIGBUS),
            "a fault outside the shared files ends the process as before"
        );
    }
}
