//! The SPANK plugin in a real Slurm: Debian's munged, slurmctld and slurmd
//! started on loopback with a one-node configuration (a fake GPU cut into
//! four shards), the plugin loaded from plugstack.conf, and jobs that run
//! the C test client on the fake runtime. Needs root (slurmd's) and Slurm;
//! skipped without them unless `VRAMSHARE_REQUIRE_SLURM` is set (as in CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A daemon of the test's, killed by its pid and reaped when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `command` to die with the test process, should the test be
/// killed before its cleanup runs.
fn spawn_daemon(command: &mut Command) -> Daemon {
    use std::os::unix::process::CommandExt;
    // SAFETY: only prctl, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Daemon(command.spawn().unwrap())
}

/// The cluster: its folder, and its daemons (stopped in reverse order).
struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<Daemon>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs still running end before the daemons that run them, so that
        // no step outlives them.
        let _ = self
            .command("scancel")
            .arg("--full")
            .arg("--user=root")
            .output();
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(10) {
            let queue = self.command("squeue").arg("-h").output();
            if queue.is_ok_and(|q| q.status.success() && q.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The steps' own end, after the controller has seen their jobs end.
        std::thread::sleep(Duration::from_millis(500));
        while self.daemons.pop().is_some() {}
    }
}

impl Cluster {
    fn start() -> Option<Cluster> {
        let tools = [
            "munged",
            "slurmctld",
            "slurmd",
            "srun",
            "scancel",
            "sinfo",
            "squeue",
        ];
        let missing: Vec<&str> = tools
            .iter()
            .copied()
            .filter(|tool| on_path(&[tool]).is_none())
            .collect();
        // SAFETY: no arguments.
        let root = unsafe { libc::geteuid() } == 0;
        if !missing.is_empty() || !root {
            let why = if root {
                format!(
                    "Slurm is not installed ({} missing; apt-get install slurm-wlm munge)",
                    missing.join(", ")
                )
            } else {
                "slurmd needs root".to_string()
            };
            if std::env::var_os("VRAMSHARE_REQUIRE_SLURM").is_some() {
                panic!("{why}");
            }
            skipped(&why);
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let root_dir = dir.path().to_path_buf();
        let at = |name: &str| root_dir.join(name);
        for sub in ["state", "spool", "munge"] {
            std::fs::create_dir_all(at(sub)).unwrap();
        }
        std::fs::write(
            at("munge/munge.key"),
            (0..1024).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>(),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            at("munge/munge.key"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        let socket = at("munge/munge.socket");
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let controller = free_port();
        let node = std::iter::repeat_with(free_port)
            .find(|port| *port != controller)
            .unwrap();
        let conf = format!(
            "ClusterName=vramshare\nSlurmctldHost={host}(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={socket}\nCredType=cred/munge\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={dir}/slurmctld.pid\nSlurmdPidFile={dir}/slurmd.pid\n\
             SlurmctldLogFile={dir}/slurmctld.log\nSlurmdLogFile={dir}/slurmd.log\n\
             SlurmctldPort={controller}\nSlurmdPort={node}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\nSchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\nMpiDefault=none\n\
             PlugStackConfig={dir}/plugstack.conf\nGresTypes=gpu,shard\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:1,shard:4 State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n",
            socket = socket.display(),
            state = at("state").display(),
            spool = at("spool").display(),
            dir = dir.path().display(),
        );
        std::fs::write(at("slurm.conf"), conf).unwrap();
        std::fs::write(
            at("gres.conf"),
            format!(
                "NodeName={host} Name=gpu File=/dev/null\nNodeName={host} Name=shard Count=4\n"
            ),
        )
        .unwrap();
        std::fs::write(
            at("plugstack.conf"),
            format!(
                "required {} lib={} shards_per_gpu=4\n",
                built_library("libspank_vramshare.so").display(),
                shim_library().display()
            ),
        )
        .unwrap();
        let mut cluster = Cluster {
            dir,
            daemons: Vec::new(),
        };
        let log = |name: &str| std::fs::File::create(cluster.dir.path().join(name)).unwrap();
        let munged = spawn_daemon(
            Command::new("munged")
                .arg("-F")
                .arg("--force")
                .arg(format!("--key-file={}", at("munge/munge.key").display()))
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--pid-file={}", at("munge/munged.pid").display()))
                .arg(format!("--log-file={}", at("munge/munged.log").display()))
                .arg(format!("--seed-file={}", at("munge/seed").display()))
                .stderr(log("munged.err")),
        );
        cluster.daemons.push(munged);
        wait_for(|| socket.exists(), "munged's socket", &cluster);
        for daemon in ["slurmctld", "slurmd"] {
            let child = spawn_daemon(
                Command::new(daemon)
                    .args(["-D", "-f"])
                    .arg(at("slurm.conf"))
                    .stdout(Stdio::null())
                    .stderr(log(&format!("{daemon}.err"))),
            );
            cluster.daemons.push(child);
        }
        wait_for(
            || {
                let out = cluster
                    .command("sinfo")
                    .args(["-h", "-o", "%T"])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).trim() == "idle"
            },
            "the node idle",
            &cluster,
        );
        Some(cluster)
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm command for this cluster.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", self.conf());
        command
    }

    /// The daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        [
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.err",
            "slurmd.err",
            "munged.err",
        ]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            format!(
                "== {name}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// `srun` with `args`, the shared folder `shm` and the fake runtime's
    /// variables cleared as the test harness clears them.
    fn srun(&self, shm: &Path, args: &[&str]) -> Command {
        let mut command = self.command("srun");
        for (key, _) in std::env::vars() {
            if key.starts_with("VRAMSHARE_") || key.starts_with("FAKE_CUDA_") || key == "LD_PRELOAD"
            {
                command.env_remove(key);
            }
        }
        command
            .env("VRAMSHARE_DIR", shm)
            .env("VRAMSHARE_MOVES", "off")
            .arg("--quiet")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

fn wait_for(mut done: impl FnMut() -> bool, what: &str, cluster: &Cluster) {
    let began = Instant::now();
    while !done() {
        if began.elapsed() > Duration::from_secs(30) {
            panic!("waited 30 s for {what}\n{}", cluster.logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client() -> String {
    fake_dir(Runtime::Fake13)
        .join("client")
        .display()
        .to_string()
}

/// `vramshare ps --json` of `shm`.
fn ps(shm: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_vramshare"))
        .args(["ps", "--json", "--dir"])
        .arg(shm)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One cluster for every check: two at once on one host would share its
/// name and confuse each other's credentials.
#[test]
fn slurm_jobs_run_under_vramshare_through_the_plugin() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    jobs_get_their_quota_and_job_id_and_bad_values_are_refused(&cluster);
    two_jobs_share_a_pool_and_a_cancelled_ones_bytes_leave_it(&cluster);
}

fn jobs_get_their_quota_and_job_id_and_bad_values_are_refused(cluster: &Cluster) {
    let shm = tempfile::tempdir().unwrap();
    let client = client();

    // --vram: the task's CUDA sees 32 MiB, and what is over spills; ps names
    // the job while it runs.
    let job = cluster
        .srun(
            shm.path(),
            &[
                "--vram=32MiB",
                &client,
                "meminfo",
                "malloc:a:8M",
                "malloc:b:64M",
                "sleep:3000",
            ],
        )
        .spawn()
        .unwrap();
    let mut seen = Value::Null;
    wait_for(
        || {
            seen = ps(shm.path()).first().cloned().unwrap_or_default();
            seen["devices"]["0"]["spills"] == 1
        },
        "the job in vramshare ps",
        cluster,
    );
    assert!(
        seen["slurm_job_id"]
            .as_str()
            .is_some_and(|id| id.parse::<u32>().is_ok()),
        "{seen}"
    );
    assert_eq!(seen["devices"]["0"]["quota"], 32 * MIB, "{seen}");
    let out = job.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        cluster.logs()
    );
    assert!(
        stdout.contains(&format!(
            "meminfo rc=0 free={} total={}",
            32 * MIB,
            32 * MIB
        )),
        "{stdout}"
    );

    // A bad value is refused at submission, with the shim's message, and
    // nothing runs.
    let marker = shm.path().join("ran");
    let refused = cluster
        .srun(
            shm.path(),
            &["--vram=8XB", "touch", marker.to_str().unwrap()],
        )
        .output()
        .unwrap();
    let (_, stderr) = text(&refused);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("VRAMSHARE_QUOTA=\"8XB\" is not valid"),
        "{stderr}"
    );
    assert!(stderr.contains("accepted forms:"), "{stderr}");
    assert!(!marker.exists(), "the job ran");

    // No --vram: two of the GPU's four shards give half of it.
    let shards = cluster
        .srun(
            shm.path(),
            &[
                "--gres=shard:2",
                "sh",
                "-c",
                "echo quota=$VRAMSHARE_QUOTA preload=$LD_PRELOAD",
            ],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&shards);
    assert!(
        stdout.contains("quota=50% preload=") && stdout.contains("libvramshare.so"),
        "{stdout}\n{stderr}"
    );

    // sbatch: the batch script's tasks are under the quota, and so is a
    // step it starts (which inherits the script's variables; its shards do
    // not replace the quota).
    let output = shm.path().join("batch.out");
    let script = format!("{client} meminfo; srun --quiet {client} meminfo");
    let batch = cluster
        .command("sbatch")
        .env("VRAMSHARE_DIR", shm.path())
        .env("VRAMSHARE_MOVES", "off")
        .args(["--wait", "--quiet", "--vram=16MiB", "--gres=shard:2"])
        .arg(format!("--output={}", output.display()))
        .arg(format!("--wrap={script}"))
        .output()
        .unwrap();
    assert!(
        batch.status.success(),
        "{:?}\n{}",
        text(&batch),
        cluster.logs()
    );
    let printed = std::fs::read_to_string(&output).unwrap();
    let want = format!("meminfo rc=0 free={} total={}", 16 * MIB, 16 * MIB);
    assert_eq!(
        printed.matches(&want).count(),
        2,
        "the script and its step: {printed}"
    );

    // An option for a pool without the pool is refused at submission.
    let lonely = cluster
        .srun(
            shm.path(),
            &["--vram-pool-quota=8MiB", "touch", marker.to_str().unwrap()],
        )
        .output()
        .unwrap();
    let (_, stderr) = text(&lonely);
    assert!(
        !lonely.status.success() && stderr.contains("give --vram-pool=NAME too"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the job ran");
}

fn two_jobs_share_a_pool_and_a_cancelled_ones_bytes_leave_it(cluster: &Cluster) {
    let shm = tempfile::tempdir().unwrap();
    let client = client();
    let pool = [
        "--vram=64MiB",
        "--vram-pool=team",
        "--vram-pool-quota=48MiB",
    ];
    let mut first: Vec<&str> = pool.to_vec();
    first.extend([client.as_str(), "malloc:a:32M", "sleep:60000"]);
    let long = cluster.srun(shm.path(), &first).spawn().unwrap();
    let _long = Daemon(long);
    wait_for(|| ps(shm.path()).len() == 1, "the first job", cluster);
    let mut second: Vec<&str> = pool.to_vec();
    second.extend([client.as_str(), "malloc:b:32M", "sleep:60000"]);
    let other = Daemon(cluster.srun(shm.path(), &second).spawn().unwrap());
    let mut rows = Vec::new();
    wait_for(
        || {
            rows = ps(shm.path());
            rows.len() == 2 && rows.iter().all(|r| r["devices"]["0"]["allocations"] == 1)
        },
        "both jobs",
        cluster,
    );
    // Together they hold no more than the pool's budget on the device.
    let device: u64 = rows
        .iter()
        .map(|r| r["devices"]["0"]["device_bytes"].as_u64().unwrap())
        .sum();
    let spilled: u64 = rows
        .iter()
        .map(|r| r["devices"]["0"]["spilled_bytes"].as_u64().unwrap())
        .sum();
    assert!(
        device <= 48 * MIB && device + spilled == 64 * MIB,
        "{rows:?}"
    );
    // scancel of the second: within a second it is gone from ps, and the
    // pool holds only the first job's bytes.
    let job = rows
        .iter()
        .find(|r| r["cmdline"].as_str().unwrap().contains("malloc:b"))
        .and_then(|r| r["slurm_job_id"].as_str())
        .unwrap()
        .to_string();
    let cancelled = Instant::now();
    let out = cluster.command("scancel").arg(&job).output().unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let survivor_bytes = || {
        let rows = ps(shm.path());
        (rows.len() == 1).then(|| rows[0]["devices"]["0"]["device_bytes"].as_u64().unwrap())
    };
    let pool_bytes = || {
        let out = Command::new(env!("CARGO_BIN_EXE_vramshare"))
            .args(["quota", "get", "--json", "--dir"])
            .arg(shm.path())
            .output()
            .unwrap();
        let listing: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        listing["pools"][0]["device_bytes"].as_u64()
    };
    let mut last = (None, None);
    while cancelled.elapsed() < Duration::from_secs(1) {
        last = (survivor_bytes(), pool_bytes());
        if last.0.is_some() && last.0 == last.1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        last.0.is_some() && last.0 == last.1,
        "1 s after scancel: {last:?}\n{}",
        cluster.logs()
    );
    drop(other);
}
