//! The shared files in `VRAMSHARE_DIR` (default `/dev/shm/vramshare-$UID`):
//! made by whichever process needs them first, mapped by everyone, and
//! checked before they are trusted.
//!
//! A file is made under a temporary name, filled in, and then linked into
//! place, so no process ever maps a half-made file, with its space reserved
//! on the filesystem, so that no write to it can fault. The folder is 0700
//! and the files 0600. Before a file is trusted: the folder must be the
//! user's (a symbolic link to it only if the user made the link) and
//! writable by no one else; each file is opened without following links and
//! without blocking, and must be a regular file of the user's that no one
//! else can write. Each mapping is guarded against a file cut short
//! ([`crate::fault_guard`]).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

pub use crate::mapped::{FileLock, Mapped};

/// The folder of the shared files.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("VRAMSHARE_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(format!("/dev/shm/vramshare-{}", crate::process::uid())),
    }
}

/// Why a shared file cannot be used.
#[derive(Debug)]
pub enum FileError {
    Missing(PathBuf),
    Io(PathBuf, io::Error),
    ForeignOwner {
        path: PathBuf,
        owner: u32,
        me: u32,
    },
    /// Others than its owner may write it (`mode`: its permission bits).
    Writable {
        path: PathBuf,
        mode: u32,
        folder: bool,
    },
    /// Wrong magic, version, size or layout: the reason in words.
    Invalid(PathBuf, String),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Missing(path) => write!(
                f,
                "{} does not exist (no process has run under vramshare with this VRAMSHARE_DIR)",
                path.display()
            ),
            FileError::Io(path, error) => write!(f, "{}: {error}", path.display()),
            FileError::ForeignOwner { path, owner, me } => write!(
                f,
                "{} belongs to {}, not to you (uid {me}): refused; set VRAMSHARE_DIR (or --dir) to a folder of your own",
                path.display(),
                who(*owner),
            ),
            FileError::Writable { path, mode, folder } => write!(
                f,
                "{} can be written by other users (mode {mode:04o}): refused, since they could change quotas through it; make it yours alone with chmod {} {}",
                path.display(),
                if *folder { "700" } else { "600" },
                path.display()
            ),
            FileError::Invalid(path, why) => write!(f, "{}: {why}", path.display()),
        }
    }
}

impl std::error::Error for FileError {}

/// A shared file's layout: a header (magic, version, slot size, slot
/// count), then a table of fixed-size slots. Making and checking a file
/// follow from these constants.
pub trait SharedFile {
    /// File name inside the folder.
    const NAME: &'static str;
    /// What it is, in messages ("trace ring").
    const WHAT: &'static str;
    const MAGIC: u64;
    const VERSION: u32;
    /// Bytes before the first slot.
    const HEADER_LEN: usize;
    const SLOT_SIZE: usize;
    /// Slots in a newly made file.
    const SLOTS: u64;

    /// Further checks of the slot count of a file whose header is right.
    fn check_count(_count: u64) -> Result<(), String> {
        Ok(())
    }
    /// Length of a newly made file.
    fn new_len() -> usize {
        Self::HEADER_LEN + Self::SLOT_SIZE * Self::SLOTS as usize
    }
    /// Writes the header of a newly made (zeroed) file.
    fn init(bytes: &mut [u8]) {
        write_header(
            bytes,
            Self::MAGIC,
            Self::VERSION,
            Self::SLOT_SIZE as u32,
            Self::SLOTS,
        );
    }
    /// Checks magic, version and layout against the file's length; returns
    /// the slot count.
    fn validate(bytes: &[u8]) -> Result<u64, String> {
        let count = check_header(
            bytes,
            Self::MAGIC,
            Self::VERSION,
            Self::SLOT_SIZE as u32,
            Self::HEADER_LEN,
            Self::WHAT,
        )?;
        Self::check_count(count)?;
        Ok(count)
    }
}

/// The slots of a validated file of layout `F`, as `T`s.
///
/// # Safety
/// `bytes` passed `F::validate`; `T` is the slot type of `F` (its size is
/// `F::SLOT_SIZE`), made of atomics only, and the mapping is page-aligned.
pub unsafe fn slots<F: SharedFile, T>(bytes: &[u8]) -> &[T] {
    debug_assert_eq!(std::mem::size_of::<T>(), F::SLOT_SIZE);
    let count = read_u64(bytes, 16) as usize;
    // SAFETY: per the caller, `count` slots of T follow the header, aligned.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().add(F::HEADER_LEN) as *const T, count) }
}

/// The name of user `uid`, for messages ("uid 1001 (alice)").
fn who(uid: u32) -> String {
    match crate::process::user_name(uid) {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// What a file that is not a regular one is, in words ("a FIFO or pipe").
pub fn kind(file_type: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO or pipe"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// The checks on who may have written a folder or file: its owner must be
/// the user, and no one else may write it.
fn check_owner(path: &Path, metadata: &fs::Metadata) -> Result<(), FileError> {
    let me = crate::process::uid();
    if metadata.uid() != me {
        return Err(FileError::ForeignOwner {
            path: path.to_path_buf(),
            owner: metadata.uid(),
            me,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(FileError::Writable {
            path: path.to_path_buf(),
            mode,
            folder: metadata.is_dir(),
        });
    }
    Ok(())
}

/// Checks the folder before anything in it is used. A symbolic link in
/// its place (the default folder is in world-writable `/dev/shm`) is
/// followed only if the user made it; its target is then checked as the
/// folder. `Ok(false)`: the folder does not exist.
fn check_dir(dir: &Path) -> Result<bool, FileError> {
    let io_error = |e| FileError::Io(dir.to_path_buf(), e);
    let link = match fs::symlink_metadata(dir) {
        Ok(link) => link,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(io_error(error)),
    };
    let metadata = if link.file_type().is_symlink() {
        let me = crate::process::uid();
        if link.uid() != me {
            return Err(FileError::ForeignOwner {
                path: dir.to_path_buf(),
                owner: link.uid(),
                me,
            });
        }
        match fs::metadata(dir) {
            Ok(target) => target,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(FileError::Invalid(
                    dir.to_path_buf(),
                    "a symbolic link to nothing: make the folder it names, or remove the link"
                        .into(),
                ))
            }
            Err(error) => return Err(io_error(error)),
        }
    } else {
        link
    };
    if !metadata.is_dir() {
        return Err(FileError::Invalid(
            dir.to_path_buf(),
            format!("{}, not a folder", kind(metadata.file_type())),
        ));
    }
    check_owner(dir, &metadata)?;
    Ok(true)
}

fn ensure_dir(dir: &Path) -> Result<(), FileError> {
    if check_dir(dir)? {
        return Ok(());
    }
    match fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
    {
        Ok(()) => {}
        Err(error) => return Err(FileError::Io(dir.to_path_buf(), error)),
    }
    match check_dir(dir)? {
        true => Ok(()),
        false => Err(FileError::Io(
            dir.to_path_buf(),
            io::Error::other("made, then removed by another process at once"),
        )),
    }
}

/// Opens a shared file without following a link and without blocking (a
/// FIFO in its place would otherwise hang the open), and checks that it is
/// a regular file of the user's that no one else can write.
fn open_checked(path: &Path, write: bool, create: bool) -> Result<fs::File, FileError> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .create_new(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ENOENT) => FileError::Missing(path.to_path_buf()),
            Some(libc::ELOOP) => FileError::Invalid(
                path.to_path_buf(),
                "a symbolic link: refused (shared files are never opened through a link); remove it".into(),
            ),
            Some(libc::EISDIR) => {
                FileError::Invalid(path.to_path_buf(), "a folder, not a regular file".into())
            }
            _ => FileError::Io(path.to_path_buf(), error),
        })?;
    let metadata = file
        .metadata()
        .map_err(|e| FileError::Io(path.to_path_buf(), e))?;
    if !metadata.file_type().is_file() {
        return Err(FileError::Invalid(
            path.to_path_buf(),
            format!(
                "{}, not a regular file: refused; remove it",
                kind(metadata.file_type())
            ),
        ));
    }
    check_owner(path, &metadata)?;
    Ok(file)
}

/// Reserves the file's whole length on its filesystem, so that no later
/// write to the mapping can find a full filesystem (which would be SIGBUS
/// in the job, not an error). Already reserved pages cost nothing. A file
/// others may be writing (`shared`) is reserved only by the filesystem
/// itself: the C library's fallback for filesystems without `fallocate`
/// writes zeros, over whatever another process just stored.
fn reserve(
    file: &fs::File,
    len: usize,
    what: &str,
    path: &Path,
    shared: bool,
) -> Result<(), FileError> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
    let error = if rc == 0 {
        return Ok(());
    } else {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    };
    let error = match error {
        libc::EOPNOTSUPP if shared => return Ok(()),
        // SAFETY: as above; posix_fallocate returns its error.
        libc::EOPNOTSUPP => unsafe {
            libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t)
        },
        other => other,
    };
    if error == 0 {
        return Ok(());
    }
    Err(FileError::Io(
        path.to_path_buf(),
        io::Error::other(format!(
            "cannot reserve the {len} bytes of a {what}: {}",
            io::Error::from_raw_os_error(error)
        )),
    ))
}

fn validated<F: SharedFile>(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    F::validate(bytes)
        .map(|_| ())
        .map_err(|why| FileError::Invalid(path.to_path_buf(), why))
}

/// Maps the file for writing, making it first if it does not exist.
pub fn open_or_create<F: SharedFile>(dir: &Path) -> Result<Mapped<MmapMut>, FileError> {
    ensure_dir(dir)?;
    let path = dir.join(F::NAME);
    // A file can be removed (replaced) between making and opening.
    for _ in 0..3 {
        match open_checked(&path, true, false) {
            Ok(file) => {
                // SAFETY: a shared mapping of a file that other processes also
                // map; every access to it goes through atomics or is checked,
                // and a page cut short is caught by the fault guard.
                let map = unsafe { MmapMut::map_mut(&file) }
                    .map_err(|e| FileError::Io(path.clone(), e))?;
                let map = Mapped::new(map, &path);
                validated::<F>(&path, map.as_ref())?;
                reserve(&file, map.as_ref().len(), F::WHAT, &path, true)?;
                return Ok(map);
            }
            Err(FileError::Missing(_)) => create::<F>(dir, &path)?,
            Err(error) => return Err(error),
        }
    }
    Err(FileError::Io(
        path,
        io::Error::other("removed by another process each time it was made"),
    ))
}

/// [`open_or_create`], and a file that fails its checks (left by another
/// vramshare version, or corrupt) is replaced by a fresh one if no process
/// has it mapped; `replaced` is told what was wrong with it. One mapped by
/// a running process is refused, naming the process. (After an upgrade the
/// folder holds the old version's files; nothing else could read them.)
pub fn open_or_replace<F: SharedFile>(
    dir: &Path,
    replaced: impl FnOnce(&FileError),
) -> Result<Mapped<MmapMut>, FileError> {
    let (path, why) = match open_or_create::<F>(dir) {
        Err(FileError::Invalid(path, why)) if path != dir => (path, why),
        other => return other,
    };
    // One process replaces it; the others wait here, then use its file.
    let _lock = DirLock::exclusive(dir)?;
    match open_or_create::<F>(dir) {
        Err(FileError::Invalid(again, _)) if again == path => {}
        other => return other,
    }
    if let Some(pid) = mapped_by(&path) {
        return Err(FileError::Invalid(
            path,
            format!("{why}; process {pid} still uses it, so it stays: set VRAMSHARE_DIR apart for this process, or start it after that one ends"),
        ));
    }
    // The folder was checked (the user's, no one else's to write), so the
    // name cannot lead anywhere else; a folder in its place is not removed.
    fs::remove_file(&path).map_err(|e| FileError::Io(path.clone(), e))?;
    replaced(&FileError::Invalid(path, why));
    open_or_create::<F>(dir)
}

/// An exclusive `flock` on a folder, released when dropped or when the
/// process dies (the kernel releases it: a dead process never holds it).
struct DirLock {
    _folder: fs::File,
}

impl DirLock {
    fn exclusive(dir: &Path) -> Result<DirLock, FileError> {
        let folder = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| FileError::Io(dir.to_path_buf(), e))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor we own.
        if unsafe { libc::flock(folder.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(FileError::Io(dir.to_path_buf(), io::Error::last_os_error()));
        }
        Ok(DirLock { _folder: folder })
    }
}

/// A process (other than this one) that has `path` mapped, from
/// `/proc/PID/maps`; processes whose maps cannot be read (other users',
/// who cannot open a 0700 folder of ours) are skipped.
fn mapped_by(path: &Path) -> Option<u32> {
    let path = fs::canonicalize(path).ok()?;
    let path = path.to_str()?;
    let deleted = format!("{path} (deleted)");
    let me = std::process::id();
    fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .find(|pid| {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| {
                maps.lines()
                    .any(|line| line.ends_with(path) || line.ends_with(&deleted))
            })
        })
}

/// Makes the file under a temporary name, with its space reserved, and
/// links it into place; losing the race to another process is fine (its
/// file is used). A filesystem too full for the file refuses it here, once,
/// instead of faulting the job at some later write.
fn create<F: SharedFile>(dir: &Path, path: &Path) -> Result<(), FileError> {
    // A name no other process uses: processes of two PID namespaces (two
    // containers sharing /dev/shm) may have the same pid.
    let mut attempt = 0u64;
    let (temp, file) = loop {
        let temp = dir.join(format!(
            ".{}.{}.{}.{attempt}.tmp",
            F::NAME,
            std::process::id(),
            crate::process::monotonic_ns()
        ));
        match open_checked(&temp, true, true) {
            Ok(file) => break (temp, file),
            Err(FileError::Io(_, error))
                if error.kind() == io::ErrorKind::AlreadyExists && attempt < 8 =>
            {
                attempt += 1
            }
            Err(error) => return Err(error),
        }
    };
    let made = (|| {
        reserve(&file, F::new_len(), F::WHAT, dir, false)?;
        // SAFETY: the file is ours alone until it is linked into place.
        let mut map =
            unsafe { MmapMut::map_mut(&file) }.map_err(|e| FileError::Io(temp.clone(), e))?;
        F::init(&mut map);
        let linked = fs::hard_link(&temp, path);
        match linked {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                Err(FileError::Io(path.to_path_buf(), e))
            }
            _ => Ok(()),
        }
    })();
    let _ = fs::remove_file(&temp);
    made
}

/// Maps an existing file for writing, without ever making it (for
/// `vramshare quota set`, which changes a live process's quota in place).
pub fn open_existing_mut<F: SharedFile>(dir: &Path) -> Result<Mapped<MmapMut>, FileError> {
    let (path, file) = existing(dir, F::NAME, true)?;
    // SAFETY: a shared mapping, written only through atomics; a page cut
    // short is caught by the fault guard.
    let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| FileError::Io(path.clone(), e))?;
    let map = Mapped::new(map, &path);
    validated::<F>(&path, map.as_ref())?;
    Ok(map)
}

/// Maps an existing file for reading (the command never makes the shared
/// files, and changes only quotas).
pub fn open_existing<F: SharedFile>(dir: &Path) -> Result<Mapped<Mmap>, FileError> {
    let (path, file) = existing(dir, F::NAME, false)?;
    // SAFETY: read-only shared mapping; read through atomics or checked; a
    // page cut short is caught by the fault guard.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| FileError::Io(path.clone(), e))?;
    let map = Mapped::new(map, &path);
    validated::<F>(&path, map.as_ref())?;
    Ok(map)
}

/// Opens the file `name` in `dir` if it exists (for writing too if
/// `write`), after checking the folder: a folder of another user's says
/// so, rather than that the file is missing.
fn existing(dir: &Path, name: &str, write: bool) -> Result<(PathBuf, fs::File), FileError> {
    let path = dir.join(name);
    if !check_dir(dir)? {
        return Err(FileError::Missing(path));
    }
    let file = open_checked(&path, write, false)?;
    Ok((path, file))
}

/// Reads a little-endian `u64` / `u32` at `offset` of a header.
pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(bytes[offset..offset + 8].try_into().unwrap())
}
pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

/// The checks every header starts with.
pub(crate) fn check_header(
    bytes: &[u8],
    magic: u64,
    version: u32,
    slot_size: u32,
    header_len: usize,
    what: &str,
) -> Result<u64, String> {
    if bytes.len() < header_len {
        return Err(format!(
            "truncated: {} bytes, shorter than the {header_len}-byte header of a {what}",
            bytes.len()
        ));
    }
    // The readers take the header and slots as atomics in place, which
    // must be 8-byte aligned. A mapping always is (page-aligned); bytes
    // from anywhere else may not be, and are refused rather than misread.
    if !(bytes.as_ptr() as usize).is_multiple_of(8) {
        return Err(format!(
            "a {what} at a misaligned address: not readable in place"
        ));
    }
    if read_u64(bytes, 0) != magic {
        return Err(format!("not a vramshare {what} (wrong magic number)"));
    }
    let found = read_u32(bytes, 8);
    if found != version {
        return Err(format!(
            "a {what} of format version {found}; this vramshare reads version {version}"
        ));
    }
    let found_slot = read_u32(bytes, 12);
    if found_slot != slot_size {
        return Err(format!(
            "{what} slots of {found_slot} bytes, expected {slot_size}"
        ));
    }
    let count = read_u64(bytes, 16);
    let expected = count
        .checked_mul(slot_size as u64)
        .and_then(|n| n.checked_add(header_len as u64));
    if expected != Some(bytes.len() as u64) {
        return Err(format!(
            "{} bytes, but its header says {count} slots ({} bytes): truncated or corrupt",
            bytes.len(),
            expected.map_or("overflowing".into(), |n| n.to_string())
        ));
    }
    Ok(count)
}

pub(crate) fn write_header(bytes: &mut [u8], magic: u64, version: u32, slot_size: u32, count: u64) {
    bytes[0..8].copy_from_slice(&magic.to_ne_bytes());
    bytes[8..12].copy_from_slice(&version.to_ne_bytes());
    bytes[12..16].copy_from_slice(&slot_size.to_ne_bytes());
    bytes[16..24].copy_from_slice(&count.to_ne_bytes());
}
