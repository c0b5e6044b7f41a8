//! A Slurm SPANK plugin that puts a job's tasks under vramshare.
//!
//! It adds `--vram=SIZE`, `--vram-spill=host|off`, `--vram-pool=NAME`,
//! `--vram-pool-quota=SIZE` and `--vram-priority=high|normal|low` to
//! `srun`, `sbatch` and `salloc`.
//! Each value is checked where it is given, so a bad one stops the job at
//! submission with the message the shim would print. In each task, before
//! the program starts, the plugin preloads `libvramshare.so` and sets the
//! variables. With no `--vram`, and `shards_per_gpu=M` in plugstack.conf, a
//! job holding N of a GPU's M shards (`--gres=shard:N`) gets N/M of its
//! memory.
//!
//! plugstack.conf arguments: `lib=PATH` (default: the libvramshare.so
//! beside this plugin), `shards_per_gpu=M`.

mod ffi;

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::Mutex;

use ffi::{spank_t, SpankOption};
use vramshare_common::settings::{forms, Priority, Spill};
use vramshare_common::size::{invalid_setting, parse_quota, QUOTA_FORMS};

/// The options given to this job, as each callback checked them.
#[derive(Default)]
struct Given {
    quota: Option<String>,
    spill: Option<String>,
    pool: Option<String>,
    pool_quota: Option<String>,
    priority: Option<String>,
}

/// The plugin's arguments in plugstack.conf.
#[derive(Default)]
struct Arguments {
    lib: Option<String>,
    shards_per_gpu: Option<u32>,
}

static GIVEN: Mutex<Given> = Mutex::new(Given {
    quota: None,
    spill: None,
    pool: None,
    pool_quota: None,
    priority: None,
});
static ARGUMENTS: Mutex<Arguments> = Mutex::new(Arguments {
    lib: None,
    shards_per_gpu: None,
});

/// Says `message` through Slurm's log (to the user, at submission).
fn say(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: a "%s" format with one C string, as slurm_error expects.
    unsafe { ffi::slurm_error(c"%s".as_ptr(), text.as_ptr()) };
}

/// The option's value as text, if it is one.
///
/// # Safety
/// `arg` is null or a C string Slurm hands the callback.
unsafe fn text(arg: *const c_char) -> Option<String> {
    if arg.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    Some(
        unsafe { CStr::from_ptr(arg) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Checks a value with `check` (an error says why, in the shim's words)
/// and keeps it with `keep`; 0 if it is good, -1 (the job refused) if not.
fn take(
    arg: *const c_char,
    check: impl Fn(&str) -> Result<(), String>,
    keep: impl FnOnce(&mut Given, String),
) -> c_int {
    // SAFETY: Slurm's option argument, or null.
    let Some(value) = (unsafe { text(arg) }) else {
        say("vramshare: the option needs a value");
        return -1;
    };
    if let Err(message) = check(&value) {
        say(&message);
        return -1;
    }
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    keep(&mut given, value);
    0
}

/// Takes a size in the forms of `variable` (`VRAMSHARE_QUOTA`'s).
fn size(arg: *const c_char, variable: &str, keep: impl FnOnce(&mut Given, String)) -> c_int {
    let check = |v: &str| {
        parse_quota(v)
            .map(|_| ())
            .map_err(|why| invalid_setting(variable, v, &why, QUOTA_FORMS))
    };
    take(arg, check, keep)
}

extern "C" fn vram(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
    size(arg, "VRAMSHARE_QUOTA", |g, v| g.quota = Some(v))
}

/// Takes one of a setting's words (`names`, which `parse` knows), as the
/// shim checks `variable`.
fn word<T>(
    arg: *const c_char,
    variable: &str,
    reason: &str,
    names: &[&str],
    parse: fn(&str) -> Option<T>,
    keep: impl FnOnce(&mut Given, String),
) -> c_int {
    let check = |v: &str| match parse(v) {
        Some(_) => Ok(()),
        None => Err(invalid_setting(variable, v, reason, &forms(names))),
    };
    take(arg, check, keep)
}

extern "C" fn vram_spill(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
    let keep = |g: &mut Given, v| g.spill = Some(v);
    word(
        arg,
        "VRAMSHARE_SPILL",
        "unknown mode",
        Spill::NAMES,
        Spill::parse,
        keep,
    )
}

extern "C" fn vram_pool(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
    take(
        arg,
        |v| {
            vramshare_common::pool::check_name(v.trim()).map_err(|_| {
                invalid_setting(
                    "VRAMSHARE_POOL",
                    v,
                    "not a pool name",
                    vramshare_common::pool::NAME_FORMS,
                )
            })
        },
        |g, v| g.pool = Some(v),
    )
}

extern "C" fn vram_pool_quota(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
    size(arg, "VRAMSHARE_POOL_QUOTA", |g, v| g.pool_quota = Some(v))
}

extern "C" fn vram_priority(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
    let keep = |g: &mut Given, v| g.priority = Some(v);
    let names = Priority::NAMES;
    word(
        arg,
        "VRAMSHARE_PRIORITY",
        "unknown priority",
        names,
        Priority::parse,
        keep,
    )
}

/// The plugin's options, registered in every context (sbatch and salloc
/// take options only so).
fn options() -> Vec<SpankOption> {
    let option =
        |name: &'static CStr, arginfo: &'static CStr, usage: &'static CStr, cb| SpankOption {
            name: name.as_ptr(),
            arginfo: arginfo.as_ptr(),
            usage: usage.as_ptr(),
            has_arg: 1,
            val: 0,
            cb: Some(cb),
        };
    vec![
        option(c"vram", c"SIZE", c"Device memory each task may hold per GPU (vramshare): 8GiB, 512MiB, 50%, or per GPU 0=8GiB,1=4GiB", vram),
        option(c"vram-spill", c"MODE", c"What an allocation over --vram gets: host (spilled to host memory) or off (CUDA's out-of-memory error)", vram_spill),
        option(c"vram-pool", c"NAME", c"Share a vramshare pool's budget with the other jobs in it", vram_pool),
        option(c"vram-pool-quota", c"SIZE", c"The vramshare pool's budget, if it has none yet (the forms of --vram)", vram_pool_quota),
        option(c"vram-priority", c"LEVEL", c"Who gives way when the pool is full: high, normal or low", vram_priority),
    ]
}

/// Reads plugstack.conf's arguments (`lib=PATH`, `shards_per_gpu=M`).
///
/// # Safety
/// `av` holds `ac` C strings, as Slurm passes them.
unsafe fn read_arguments(ac: c_int, av: *mut *mut c_char) -> Result<Arguments, String> {
    let mut arguments = Arguments::default();
    for i in 0..ac.max(0) as usize {
        // SAFETY: the caller's promise.
        let Some(word) = (unsafe { text(*av.add(i)) }) else {
            continue;
        };
        match word.split_once('=') {
            Some(("lib", path)) => arguments.lib = Some(path.to_string()),
            Some(("shards_per_gpu", count)) => {
                let count = count.parse().ok().filter(|c: &u32| *c > 0).ok_or_else(|| {
                    format!("vramshare: plugstack.conf argument shards_per_gpu={count} is not a count of shards (a whole number above 0)")
                })?;
                arguments.shards_per_gpu = Some(count);
            }
            _ => {
                return Err(format!("vramshare: unknown plugstack.conf argument {word:?} (accepted: lib=PATH, shards_per_gpu=M)"))
            }
        }
    }
    Ok(arguments)
}

/// Registers the options, and reads the plugin's arguments.
///
/// # Safety
/// Called by Slurm with its handle and the plugin's arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    // Slurm copies each option; its strings are static.
    for mut option in options() {
        // SAFETY: Slurm's handle and an option of static strings.
        let rc = unsafe { ffi::spank_option_register(sp, &mut option) };
        if rc != 0 {
            say(&format!(
                "vramshare: registering a Slurm option failed (spank error {rc})"
            ));
            return -1;
        }
    }
    // SAFETY: Slurm's arguments.
    let arguments = match unsafe { read_arguments(ac, av) } {
        Ok(arguments) => arguments,
        Err(message) => {
            say(&message);
            return -1;
        }
    };
    // On the node (slurmstepd), a library that is not there fails the step
    // rather than run a job that asked for a quota without one.
    // SAFETY: Slurm's handle.
    if unsafe { ffi::spank_remote(sp) } == 1 && library(&arguments).is_none() {
        say("vramshare: cannot find libvramshare.so on this node: give lib=PATH in plugstack.conf, or put it beside the plugin");
        return -1;
    }
    *ARGUMENTS.lock().unwrap_or_else(|e| e.into_inner()) = arguments;
    0
}

/// The library to preload: `lib=` if it is a file, else the one beside the
/// plugin.
fn library(arguments: &Arguments) -> Option<String> {
    match &arguments.lib {
        Some(lib) => std::path::Path::new(lib).is_file().then(|| lib.clone()),
        None => ffi::beside_plugin(),
    }
}

/// After the options, where the job is submitted (srun, sbatch, salloc):
/// refuses what the shim would refuse once the job runs, before it is
/// queued.
///
/// # Safety
/// Called by Slurm with its handle.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    _sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    let given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let lonely = [
        ("--vram-pool-quota", given.pool_quota.is_some()),
        ("--vram-priority", given.priority.is_some()),
    ];
    for (option, set) in lonely {
        if set && given.pool.is_none() {
            say(&format!(
                "vramshare: {option} is for a pool: give --vram-pool=NAME too"
            ));
            return -1;
        }
    }
    0
}

/// The quota a job gets from its shards: N of a GPU's M shards, N/M of its
/// memory.
fn shard_quota(shards: &str, per_gpu: u32) -> Option<String> {
    let held: u32 = shards.trim().parse().ok()?;
    (held > 0).then(|| {
        let share = (100.0 * f64::from(held) / f64::from(per_gpu)).min(100.0);
        format!("{}%", (share * 1000.0).floor() / 1000.0)
    })
}

/// In each task, before its program starts: the preload and the variables.
///
/// # Safety
/// Called by Slurm with its handle.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    let given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let arguments = ARGUMENTS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: Slurm's handle.
    let getenv = |name: &str| unsafe { ffi::getenv(sp, name) };
    // A share from the job's shards gives way to a quota the job already
    // has: one given to the batch job around this step (Slurm passes the
    // options to the batch script's steps only as the variables they set),
    // or the job's own VRAMSHARE_QUOTA.
    let from_shards = given.quota.is_none();
    let quota = given.quota.clone().or_else(|| {
        let per_gpu = arguments.shards_per_gpu?;
        shard_quota(&getenv("SLURM_SHARDS_ON_NODE")?, per_gpu)
    });
    let wanted = quota.is_some()
        || given.spill.is_some()
        || given.pool.is_some()
        || given.pool_quota.is_some()
        || given.priority.is_some();
    if !wanted {
        return 0;
    }
    let Some(lib) = library(&arguments) else {
        say("vramshare: cannot find libvramshare.so on this node; the task runs without vramshare");
        return -1;
    };
    // Once: a step inside a batch job has the batch job's preload already.
    let preload = match getenv("LD_PRELOAD") {
        Some(before) if before.split([':', ' ']).any(|entry| entry == lib) => before,
        Some(before) if !before.is_empty() => format!("{lib}:{before}"),
        _ => lib,
    };
    let settings = [
        ("LD_PRELOAD", Some(preload), true),
        ("VRAMSHARE_QUOTA", quota, !from_shards),
        ("VRAMSHARE_SPILL", given.spill.clone(), true),
        ("VRAMSHARE_POOL", given.pool.clone(), true),
        ("VRAMSHARE_POOL_QUOTA", given.pool_quota.clone(), true),
        ("VRAMSHARE_PRIORITY", given.priority.clone(), true),
    ];
    for (name, value, overwrite) in settings {
        let Some(value) = value else { continue };
        // SAFETY: Slurm's handle.
        if let Err(rc) = unsafe { ffi::setenv(sp, name, &value, overwrite) } {
            say(&format!(
                "vramshare: setting {name} in the task failed (spank error {rc})"
            ));
            return -1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_jobs_shards_give_it_their_share_of_the_gpu() {
        assert_eq!(super::shard_quota("2", 4).as_deref(), Some("50%"));
        assert_eq!(super::shard_quota("1", 3).as_deref(), Some("33.333%"));
        assert_eq!(super::shard_quota("9", 4).as_deref(), Some("100%"));
        assert_eq!(super::shard_quota("0", 4), None);
        assert_eq!(super::shard_quota("many", 4), None);
        assert!(vramshare_common::size::parse_quota("33.333%").is_ok());
    }
}
