//! Slurm's SPANK interface (`<slurm/spank.h>`), as much of it as the plugin
//! uses, and the symbols Slurm reads from a plugin. The functions are
//! Slurm's own, found in the process that loads the plugin (srun, sbatch,
//! salloc, slurmstepd).

use std::ffi::{c_char, c_int, c_void, CStr, CString};

#[allow(non_camel_case_types)]
pub type spank_t = *mut c_void;

/// `struct spank_option`.
#[repr(C)]
pub struct SpankOption {
    pub name: *const c_char,
    pub arginfo: *const c_char,
    pub usage: *const c_char,
    pub has_arg: c_int,
    pub val: c_int,
    pub cb: Option<extern "C" fn(c_int, *const c_char, c_int) -> c_int>,
}

extern "C" {
    pub fn spank_option_register(sp: spank_t, opt: *mut SpankOption) -> c_int;
    fn spank_getenv(sp: spank_t, var: *const c_char, buf: *mut c_char, len: c_int) -> c_int;
    fn spank_setenv(sp: spank_t, var: *const c_char, val: *const c_char, overwrite: c_int)
        -> c_int;
    pub fn slurm_error(format: *const c_char, ...);
    /// 1 in slurmstepd (the node), 0 elsewhere.
    pub fn spank_remote(sp: spank_t) -> c_int;
}

/// `ESPANK_ENV_EXISTS` and `ESPANK_NOSPACE` (`<slurm/slurm_errno.h>`).
const ENV_EXISTS: c_int = 3003;
const NOSPACE: c_int = 3005;

/// What Slurm reads to accept the plugin: its name, its kind, the Slurm it
/// was built for (the loader compares it with its own), and the SPANK
/// interface's version.
#[no_mangle]
pub static plugin_name: [u8; 10] = *b"vramshare\0";
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
pub static plugin_version: u32 = parse_version(env!("SLURM_VERSION_NUMBER"));
#[no_mangle]
pub static spank_plugin_version: u32 = 1;

const fn parse_version(text: &str) -> u32 {
    let bytes = text.as_bytes();
    let mut value = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        value = value * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    value
}

/// A variable of the job's environment, through Slurm.
///
/// # Safety
/// `sp` is Slurm's handle.
pub unsafe fn getenv(sp: spank_t, name: &str) -> Option<String> {
    let name = CString::new(name).ok()?;
    // A longer value (a long LD_PRELOAD) is asked for again, up to 1 MiB.
    let mut len = 4096;
    loop {
        let mut buf = vec![0 as c_char; len];
        // SAFETY: a buffer of the length given, and Slurm's handle.
        let rc = unsafe { spank_getenv(sp, name.as_ptr(), buf.as_mut_ptr(), len as c_int) };
        match rc {
            0 => {
                // SAFETY: Slurm wrote a C string into the buffer.
                let value = unsafe { CStr::from_ptr(buf.as_ptr()) };
                return Some(value.to_string_lossy().into_owned());
            }
            NOSPACE if len < 1 << 20 => len *= 16,
            _ => return None,
        }
    }
}

/// Sets a variable in the task's environment, through Slurm (or, unless
/// `overwrite`, leaves the one there); Slurm's error if it fails.
///
/// # Safety
/// `sp` is Slurm's handle.
pub unsafe fn setenv(sp: spank_t, name: &str, value: &str, overwrite: bool) -> Result<(), c_int> {
    let (Ok(name), Ok(value)) = (CString::new(name), CString::new(value)) else {
        return Err(-1);
    };
    // SAFETY: two C strings and Slurm's handle.
    match unsafe { spank_setenv(sp, name.as_ptr(), value.as_ptr(), c_int::from(overwrite)) } {
        0 => Ok(()),
        ENV_EXISTS if !overwrite => Ok(()),
        rc => Err(rc),
    }
}

/// The libvramshare.so in the folder this plugin was loaded from, if there.
pub fn beside_plugin() -> Option<String> {
    // SAFETY: Dl_info is plain data; all zero is a valid value of it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of one of this library's functions, and an info
    // struct of ours.
    let found = unsafe { libc::dladdr(beside_plugin as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name, a C string.
    let plugin = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let lib = std::path::Path::new(&plugin)
        .parent()?
        .join("libvramshare.so");
    lib.is_file().then(|| lib.to_string_lossy().into_owned())
}
