//! Pools: processes sharing one budget (VRAMSHARE_POOL), on the fake runtime.

mod common;
#[path = "common/pools.rs"]
mod pools;

use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use pools::*;
use serde_json::Value;
use vramshare_common::files::open_existing;
use vramshare_common::registry::{Registry, RegistryFile};

/// The tests here time what other processes do (within a second, within
/// 250 ms): they run one at a time, so that a loaded machine (CI has two
/// cores) does not starve one of them.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn eight_processes_of_four_threads_never_pass_the_pools_budget() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let budget = 96 * MIB;
    let stop = AtomicBool::new(false);
    let highest = AtomicU64::new(0);
    let outputs = std::thread::scope(|s| {
        s.spawn(|| sample_until(&shm, "stress", &stop, &highest));
        let members: Vec<Child> = (0..8)
            .map(|i| {
                let seed = (11 + i).to_string();
                spawn_member(
                    &shm,
                    "stress",
                    &["4", "3000", "2097152", &seed, "sync"],
                    "stress",
                    "96MiB",
                )
            })
            .collect();
        let outputs: Vec<_> = members
            .into_iter()
            .map(|m| (m.id(), m.wait_with_output().unwrap()))
            .collect();
        stop.store(true, Ordering::Release);
        outputs
    });
    let highest = highest.load(Ordering::Relaxed);
    assert!(
        highest <= budget,
        "the pool held {highest} bytes against a budget of {budget}"
    );
    assert!(
        highest > budget / 2,
        "the members filled the pool ({highest})"
    );
    for (_, output) in &outputs {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Each member's ledger holds exactly its live blocks.
    for (pid, output) in outputs {
        let live = live_blocks(&String::from_utf8_lossy(&output.stdout));
        let trace: Value = serde_json::from_str(
            &std::fs::read_to_string(work.path().join(format!("trace-{pid}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            leaked_blocks(&trace),
            live,
            "pid {pid}: the ledger holds exactly the live blocks"
        );
        let process = &trace["processes"][0];
        assert!(
            process["peak_device"]["0"].as_u64().unwrap() <= budget,
            "peak {} counts {}",
            process["peak_device"]["0"],
            process["counts"]
        );
    }
    assert_eq!(
        pool_bytes(&shm, "stress"),
        None,
        "members that exit take their bytes out of the pool, and the last one frees it"
    );
}

#[test]
fn members_killed_with_sigkill_give_their_bytes_back_within_a_second() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let mut members: Vec<Child> = (0..6)
        .map(|_| {
            spawn_member(
                &shm,
                "client",
                &[
                    "malloc:a:8M",
                    "malloc:b:8M",
                    "sleep:2500",
                    "free:a",
                    "malloc:c:24M",
                ],
                "team",
                "128MiB",
            )
        })
        .collect();
    let doomed: Vec<Child> = (0..2)
        .map(|_| {
            spawn_member(
                &shm,
                "client",
                &["malloc:a:16M", "sleep:20000"],
                "team",
                "128MiB",
            )
        })
        .collect();
    wait_for_pool(&shm, "team", 128 * MIB);
    for mut member in doomed {
        member.kill().unwrap(); // SIGKILL: no exit handler runs
        member.wait().unwrap();
    }
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "team") == Some(96 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "team")
            )
        },
    );
    // The others never hang: each frees a and asks for c (24M), more than
    // the budget has for all six, so some c spill; none fail.
    for member in members.drain(..) {
        let output = member.wait_with_output().unwrap();
        assert!(output.status.success());
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("malloc c rc=0"), "{stdout}");
    }
    assert_eq!(
        pool_bytes(&shm, "team"),
        None,
        "the killed members were counted out, so the last to leave freed the pool"
    );
}

#[test]
fn a_second_budget_for_a_running_pool_is_named_and_not_applied() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let first = spawn_member(&shm, "client", &["malloc:a:4M", "sleep:1500"], "p", "64MiB");
    wait_for_pool(&shm, "p", 4 * MIB);
    let second = spawn_member(&shm, "client", &["malloc:a:4M", "meminfo"], "p", "32MiB")
        .wait_with_output()
        .unwrap();
    assert!(second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("pool p runs with a budget of 64.00 MiB on device 0; VRAMSHARE_POOL_QUOTA asks 32.00 MiB, and the running budget applies"),
        "{stderr}"
    );
    // cudaMemGetInfo: the pool's budget less what its members hold.
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.contains(&format!(
            "meminfo rc=0 free={} total={}",
            56 * MIB,
            64 * MIB
        )),
        "{stdout}"
    );
    first.wait_with_output().unwrap();
}

#[test]
fn a_high_priority_member_displaces_a_low_priority_one() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    // The low member fills 48 of the pool's 64 MiB (cudaMalloc, which the
    // shim makes movable for a low-priority member); its next 16 MiB spill
    // although the pool has 16 MiB left (a low-priority member leaves the
    // last eighth to the others).
    let low = spawn_member_as(
        &shm,
        "client",
        &[
            "managed:m1:24M",
            "managed:m2:24M",
            "malloc:x:16M",
            "sleep:2500",
        ],
        "prio",
        "64MiB",
        "low",
    );
    let low_pid = low.id();
    wait_for_pool(&shm, "prio", 48 * MIB);
    std::thread::sleep(Duration::from_millis(200));
    // The high member asks for 32 MiB: the low one demotes managed blocks
    // until the pool has that much room (16 free + one 24 MiB block), and
    // the high one gets the device.
    let high = spawn_member_as(
        &shm,
        "client",
        &["malloc:h:32M", "sleep:300"],
        "prio",
        "64MiB",
        "high",
    );
    let high_pid = high.id();
    let high = high.wait_with_output().unwrap();
    assert!(high.status.success());
    let low = low.wait_with_output().unwrap();
    assert!(low.status.success());
    let high_trace = member_trace(&shm, high_pid);
    assert_eq!(
        moves(&high_trace)[0],
        ("alloc".into(), "cudaMalloc".into(), 32, "device".into()),
        "the high-priority allocation was placed on the device"
    );
    let low_moves = moves(&member_trace(&shm, low_pid));
    let x = low_moves
        .iter()
        .find(|m| m.0 == "alloc" && m.2 == 16)
        .unwrap();
    assert_eq!(x.3, "host", "the low member spilled first");
    let demoted: Vec<u64> = low_moves
        .iter()
        .filter(|m| m.0 == "demote")
        .map(|m| m.2)
        .collect();
    assert_eq!(
        demoted,
        [24],
        "the low member gave way, no more than needed: {low_moves:?}"
    );
    let demote_at = low_moves.iter().position(|m| m.0 == "demote").unwrap();
    assert!(
        low_moves[demote_at..].iter().any(|m| m.0 == "promote"),
        "and came back once the high member left: {low_moves:?}"
    );
}

#[test]
fn a_high_priority_member_allocating_fast_never_spills_while_a_slow_one_gives_way() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    // As on the GPU: moving a block to the host keeps the low member's
    // shim busy for a while (20 ms here), and meanwhile the high member
    // has taken the room and asks for its next block. The low member holds
    // 56 MiB of the 64 (all it may: the last eighth is the others').
    let low_steps: Vec<String> = (0..14)
        .map(|i| format!("malloc:l{i}:4M"))
        .chain(["sleep:3000".to_string()])
        .collect();
    let low_steps: Vec<&str> = low_steps.iter().map(String::as_str).collect();
    let low = member_command(&shm, "client", &low_steps, "slow", "64MiB", "low")
        .env("FAKE_CUDA_MOVE_DELAY_MS", "20")
        .spawn()
        .unwrap();
    wait_for_pool(&shm, "slow", 56 * MIB);
    let high_steps: Vec<String> = (0..14).map(|i| format!("malloc:h{i}:4M")).collect();
    let high_steps: Vec<&str> = high_steps.iter().map(String::as_str).collect();
    let high = spawn_member_as(&shm, "client", &high_steps, "slow", "64MiB", "high");
    let high_pid = high.id();
    assert!(high.wait_with_output().unwrap().status.success());
    let low_pid = low.id();
    assert!(low.wait_with_output().unwrap().status.success());
    let placed: Vec<String> = moves(&member_trace(&shm, high_pid))
        .into_iter()
        .filter(|m| m.0 == "alloc")
        .map(|m| m.3)
        .collect();
    assert_eq!(
        placed,
        vec!["device"; 14],
        "every high-priority allocation on the device"
    );
    let demoted = moves(&member_trace(&shm, low_pid))
        .iter()
        .filter(|m| m.0 == "demote")
        .count();
    assert!(
        demoted >= 12,
        "the low member gave 48 MiB (12 blocks) way, demoted {demoted}"
    );
}

#[test]
fn two_of_eight_stressed_members_killed_are_reaped_within_a_second() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let mut members: Vec<Child> = (0..8)
        .map(|i| {
            let seed = (31 + i).to_string();
            spawn_member(
                &shm,
                "stress",
                &["4", "8000", "2097152", &seed, "sync"],
                "churn",
                "96MiB",
            )
        })
        .collect();
    let doomed: Vec<Child> = members.drain(..2).collect();
    // Killed once all eight are in the pool and it is busy.
    poll_until(
        Duration::from_secs(10),
        || joined_members(&shm) == 8 && pool_bytes(&shm, "churn").unwrap_or(0) >= 48 * MIB,
        |_| format!("{} members joined", joined_members(&shm)),
    );
    let pids: Vec<u32> = doomed.iter().map(|c| c.id()).collect();
    for mut member in doomed {
        member.kill().unwrap();
        member.wait().unwrap();
    }
    let reaped = || {
        let registry = Registry::new(open_existing::<RegistryFile>(&shm).unwrap()).unwrap();
        registry
            .gone()
            .iter()
            .filter(|p| pids.contains(&p.pid) && p.exited)
            .count()
    };
    poll_until(
        Duration::from_secs(1),
        || reaped() == 2,
        |waited| {
            format!(
                "{} of the 2 killed members reaped after {waited:?}",
                reaped()
            )
        },
    );
    for member in members {
        let output = member.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        pool_bytes(&shm, "churn"),
        None,
        "the pool is freed, holding nothing, once its members are gone, the killed ones counted \
         out too"
    );
}

#[test]
fn freed_room_goes_to_the_high_priority_member_first() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    // 48 MiB: t 8 + n1 16 + a 24 fill it; h2 (high) and n3 (normal) spill;
    // t's exit frees 8 MiB, which only h2 may take (n ends before h, whose
    // exit would free room for n3).
    let spawn = |steps: &[&str], priority: &str| {
        spawn_member_as(&shm, "client", steps, "first", "48MiB", priority)
    };
    let t = spawn(&["malloc:t:8M", "sleep:1500"], "normal");
    let n = spawn(
        &[
            "sleep:100",
            "malloc:n1:16M",
            "sleep:700",
            "malloc:n3:8M",
            "sleep:2000",
        ],
        "normal",
    );
    let h = spawn(
        &[
            "sleep:200",
            "malloc:a:24M",
            "sleep:300",
            "malloc:h2:8M",
            "sleep:3000",
        ],
        "high",
    );
    let (n_pid, h_pid) = (n.id(), h.id());
    for member in [t, n, h] {
        assert!(member.wait_with_output().unwrap().status.success());
    }
    let placed = |pid, name_size: u64| {
        moves(&member_trace(&shm, pid))
            .into_iter()
            .filter(|m| m.2 == name_size && (m.0 == "alloc" || m.0 == "promote"))
            .map(|m| (m.0, m.3))
            .collect::<Vec<_>>()
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        placed(h_pid, 8),
        [s("alloc", "host"), s("promote", "device")],
        "h2 spilled, then came back into t's room"
    );
    let times = |pid| -> Vec<(String, u64, u64)> {
        member_trace(&shm, pid)["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["op"].as_str().unwrap().to_string(),
                    e["size"].as_u64().unwrap() >> 20,
                    e["t_ns"].as_u64().unwrap() / 1_000_000,
                )
            })
            .collect()
    };
    assert_eq!(
        placed(n_pid, 8),
        [s("alloc", "host")],
        "n3 spilled and stayed: the room was the high member's\nn: {:?}\nh: {:?}",
        times(n_pid),
        times(h_pid)
    );
}

#[test]
fn others_leave_the_room_a_high_priority_member_wants_for_its_spilled_block() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    // 64 MiB: n holds 40 (cudaMalloc: it cannot move); h gets 16, and its
    // 24 MiB h2 spills (nothing can give way). m, a normal member, then
    // allocates 8 MiB while the pool has 8 free: it leaves them to h, whose
    // h2 wants room. When n frees 16, the 24 free go to h2.
    let spawn = |steps: &[&str], priority: &str| {
        spawn_member_as(&shm, "client", steps, "wants", "64MiB", priority)
    };
    let n = spawn(
        &[
            "malloc:n1:16M",
            "malloc:n2:24M",
            "sleep:1600",
            "free:n1",
            "sleep:2500",
        ],
        "normal",
    );
    let h = spawn(
        &["sleep:200", "malloc:h1:16M", "malloc:h2:24M", "sleep:3500"],
        "high",
    );
    let m = spawn(
        &["meminfo", "sleep:1200", "malloc:x:8M", "sleep:2500"],
        "normal",
    );
    let (h_pid, m_pid) = (h.id(), m.id());
    for member in [n, h, m] {
        assert!(member.wait_with_output().unwrap().status.success());
    }
    let placed = |pid, size: u64| {
        moves(&member_trace(&shm, pid))
            .into_iter()
            .filter(|m| m.2 == size && (m.0 == "alloc" || m.0 == "promote"))
            .map(|m| format!("{} {}", m.0, m.3))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        placed(h_pid, 24),
        ["alloc host", "promote device"],
        "h2 spilled, then came back when n freed room"
    );
    assert_eq!(
        placed(m_pid, 8),
        ["alloc host"],
        "x left the free 8 MiB to h, which wanted 24"
    );
}

#[test]
fn a_member_killed_in_the_middle_of_a_move_leaves_the_pool_exact() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let stay = spawn_member(
        &shm,
        "client",
        &["malloc:s:4M", "sleep:8000"],
        "mv",
        "32MiB",
    );
    wait_for_pool(&shm, "mv", 4 * MIB);
    // m spills (24 + 16 > 28 left); freeing x gives it room, and its move
    // back keeps the shim three seconds, as a large move over the link does.
    let mover = member_command(
        &shm,
        "client",
        &["malloc:x:24M", "malloc:m:16M", "free:x", "sleep:10000"],
        "mv",
        "32MiB",
        "normal",
    )
    .env("FAKE_CUDA_MOVE_DELAY_MS", "3000")
    .spawn()
    .unwrap();
    // In flight: the pool counts m's 16 MiB on the device already.
    wait_for_pool(&shm, "mv", 20 * MIB);
    let mut mover = mover;
    mover.kill().unwrap(); // SIGKILL, mid-move
    mover.wait().unwrap();
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "mv") == Some(4 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "mv")
            )
        },
    );
    assert!(stay.wait_with_output().unwrap().status.success());
    assert_eq!(
        pool_bytes(&shm, "mv"),
        None,
        "the last to leave freed the pool"
    );
}

#[test]
fn a_member_killed_while_the_spill_tier_moves_its_block_leaves_the_pool_exact() {
    let _serial = one_at_a_time();
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let log = work.path().join("calls.log");
    let stay = spawn_member(
        &shm,
        "client",
        &["malloc:s:4M", "sleep:8000"],
        "tier",
        "32MiB",
    );
    wait_for_pool(&shm, "tier", 4 * MIB);
    // a, b, c fill the 28 MiB left; d is over the budget, in host memory.
    // Its kernel brings it in: a block moves out first, then d's bytes
    // cross, each copy keeping the shim three seconds.
    let mover = member_command(
        &shm,
        "client",
        &[
            "malloc:a:8M",
            "malloc:b:8M",
            "malloc:c:8M",
            "malloc:d:8M",
            "fill:d:1:0",
            "sleep:10000",
        ],
        "tier",
        "32MiB",
        "normal",
    )
    .env("VRAMSHARE_MOVES", "on")
    .env("FAKE_CUDA_DEVICES", "1")
    .env("FAKE_CUDA_MOVE_DELAY_MS", "3000")
    .env("FAKE_CUDA_LOG", &log)
    .spawn()
    .unwrap();
    // Killed once d's own copy has begun: its device memory is in the pool.
    poll_until(
        Duration::from_secs(10),
        || {
            let calls = std::fs::read_to_string(&log).unwrap_or_default();
            calls
                .lines()
                .filter(|l| l.contains("cuMemcpyAsync "))
                .count()
                >= 2
        },
        |_| std::fs::read_to_string(&log).unwrap_or_default(),
    );
    assert_eq!(
        pool_bytes(&shm, "tier"),
        Some(28 * MIB),
        "d counted in flight"
    );
    let mut mover = mover;
    mover.kill().unwrap(); // SIGKILL, mid-move
    mover.wait().unwrap();
    poll_until(
        Duration::from_secs(1),
        || pool_bytes(&shm, "tier") == Some(4 * MIB),
        |waited| {
            format!(
                "after {waited:?} the pool still counts {:?}",
                pool_bytes(&shm, "tier")
            )
        },
    );
    assert!(stay.wait_with_output().unwrap().status.success());
    assert_eq!(
        pool_bytes(&shm, "tier"),
        None,
        "the last to leave freed the pool"
    );
}
