//! Facts about processes from the kernel: identity that survives pid reuse,
//! command lines, and a clock shared by all processes of the machine.

/// The fields of `/proc/PID/stat` after the command name: the state first
/// (field 3), the start time 20th (field 22). The name is in parentheses and
/// may hold spaces or parentheses itself, so fields count from the last ')'.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    Some(after_name.split_whitespace().map(str::to_string).collect())
}

/// The process's start time in clock ticks since boot (`/proc/PID/stat`,
/// field 22). A pid and this together name one process: a reused pid has a
/// later start time.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether the process that had `pid` and `start` is still running (a
/// zombie counts as gone: it holds no GPU memory).
pub fn is_alive(pid: u32, start: u64) -> bool {
    let Some(fields) = stat_fields(pid).filter(|_| pid != 0) else {
        return false;
    };
    let state = fields.first().map(String::as_str);
    let started = fields.get(19).and_then(|s| s.parse::<u64>().ok());
    state != Some("Z") && state != Some("X") && started == Some(start)
}

/// The command line of `pid`, arguments joined by spaces.
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// The login name of `uid`, from the user database, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: passwd is plain data; zeroed is a valid value to be overwritten.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into the entry and buffer we own, and points
    // `found` at the entry (or leaves it null).
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string in `buffer`.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let start = start_time(me).unwrap();
        assert!(is_alive(me, start));
        assert!(!is_alive(me, start + 1), "a reused pid is another process");
        assert!(!is_alive(0, 0));
        assert!(cmdline(me).contains("vramshare_common"));
    }

    #[test]
    fn a_job_is_named_by_its_scheduler_and_its_rank_and_ranks_of_one_run_share_it() {
        let ids = |text: &str| JobIds::from_environ(text.replace(';', "\0").as_bytes());
        let rank1 = ids(
            "RANK=1;WORLD_SIZE=2;TORCHELASTIC_RUN_ID=r7;MASTER_ADDR=n1;MASTER_PORT=29500;PATH=/bin",
        );
        assert_eq!(rank1.describe().as_deref(), Some("rank 1/2"));
        let rank0 =
            ids("TORCHELASTIC_RUN_ID=r7;MASTER_PORT=29500;MASTER_ADDR=n1;RANK=0;WORLD_SIZE=2");
        assert_eq!(rank0.rank_in_run(), Some(("r7@n1:29500", 0)));
        assert_eq!(
            rank1.rank_in_run().unwrap().0,
            rank0.rank_in_run().unwrap().0
        );
        let other =
            ids("RANK=0;WORLD_SIZE=2;TORCHELASTIC_RUN_ID=r7;MASTER_ADDR=n1;MASTER_PORT=29501");
        assert_ne!(
            other.rank_in_run(),
            rank0.rank_in_run(),
            "another job's port"
        );
        let slurm = ids("SLURM_JOB_ID=42;SLURM_STEP_ID=0;RANK=3;WORLD_SIZE=8");
        assert_eq!(slurm.describe().as_deref(), Some("job 42.0, rank 3/8"));
        let pod = ids("POD_NAME=trainer;POD_NAMESPACE=ml");
        assert_eq!(pod.describe().as_deref(), Some("pod ml/trainer"));
        assert_eq!(pod.rank_in_run(), None);
        assert_eq!(
            ids("RANK=x").rank_in_run(),
            None,
            "a rank that is no number"
        );
        assert_eq!(ids("PATH=/bin").describe(), None);
    }

    #[test]
    fn a_reaped_child_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let start = start_time(child.id()).unwrap();
        assert!(is_alive(child.id(), start));
        child.kill().unwrap();
        // The signal lands asynchronously; the zombie it leaves counts as gone.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while is_alive(child.id(), start) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            !is_alive(child.id(), start),
            "a killed child (zombie until reaped) holds nothing"
        );
        child.wait().unwrap();
        assert!(!is_alive(child.id(), start));
    }
}

/// What a scheduler calls a process's job, from its environment: Slurm's
/// job and step ids, a Kubernetes pod's name and namespace (as a pod's spec
/// sets `POD_NAME` and `POD_NAMESPACE` from the downward API), and a
/// distributed job's rank (as torchrun, `torch.distributed.launch` and
/// Slurm's PyTorch recipes set `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and
/// `MASTER_PORT`; torchrun also `TORCHELASTIC_RUN_ID`). Empty where the
/// environment has none, or cannot be read (another user's process).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobIds {
    pub slurm_job_id: String,
    pub slurm_step_id: String,
    pub pod: String,
    pub namespace: String,
    pub rank: String,
    pub world_size: String,
    /// What the ranks of one distributed job share: its run id and the
    /// address of its rank 0.
    pub run: String,
}

impl JobIds {
    /// Those of `pid`, read from `/proc/PID/environ` (the environment it
    /// started with, which does not change after).
    pub fn of(pid: u32) -> JobIds {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        JobIds::from_environ(&environ)
    }

    /// Those of an environment block (`NAME=value` entries, each ended by a
    /// NUL, as `/proc/PID/environ` holds them).
    pub fn from_environ(environ: &[u8]) -> JobIds {
        let mut ids = JobIds::default();
        let (mut run_id, mut master) = (String::new(), [String::new(), String::new()]);
        for entry in environ.split(|b| *b == 0) {
            let Some(eq) = entry.iter().position(|b| *b == b'=') else {
                continue;
            };
            let value = String::from_utf8_lossy(&entry[eq + 1..]).into_owned();
            match &entry[..eq] {
                b"SLURM_JOB_ID" => ids.slurm_job_id = value,
                b"SLURM_STEP_ID" => ids.slurm_step_id = value,
                b"POD_NAME" => ids.pod = value,
                b"POD_NAMESPACE" => ids.namespace = value,
                b"RANK" => ids.rank = value,
                b"WORLD_SIZE" => ids.world_size = value,
                b"TORCHELASTIC_RUN_ID" => run_id = value,
                b"MASTER_ADDR" => master[0] = value,
                b"MASTER_PORT" => master[1] = value,
                _ => {}
            }
        }
        if !ids.rank.is_empty() {
            ids.run = format!("{run_id}@{}:{}", master[0], master[1]);
        }
        ids
    }

    /// For showing the ranks of one distributed job together: the job they
    /// share and this process's rank; `None` for a process with no rank.
    pub fn rank_in_run(&self) -> Option<(&str, u64)> {
        let rank = self.rank.parse().ok()?;
        Some((self.run.as_str(), rank))
    }

    /// The job as `ps` names it: `job 42.0` (Slurm), `pod ns/name`, or
    /// nothing; then the rank, where it has one: `rank 1/8`.
    pub fn describe(&self) -> Option<String> {
        let job = if !self.slurm_job_id.is_empty() {
            let step = if self.slurm_step_id.is_empty() {
                String::new()
            } else {
                format!(".{}", self.slurm_step_id)
            };
            Some(format!("job {}{step}", self.slurm_job_id))
        } else {
            (!self.pod.is_empty()).then(|| match self.namespace.as_str() {
                "" => format!("pod {}", self.pod),
                namespace => format!("pod {namespace}/{}", self.pod),
            })
        };
        let rank = (!self.rank.is_empty()).then(|| match self.world_size.as_str() {
            "" => format!("rank {}", self.rank),
            size => format!("rank {}/{size}", self.rank),
        });
        match (job, rank) {
            (Some(job), Some(rank)) => Some(format!("{job}, {rank}")),
            (job, rank) => job.or(rank),
        }
    }
}
