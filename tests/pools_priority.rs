//! Pools with priorities (VRAMSHARE_PRIORITY), on the fake runtime: a
//! high-priority member takes the room it wants from low-priority ones,
//! which give way by spilling, and gets freed room first.

mod common;
#[path = "common/pools.rs"]
mod pools;

use std::time::Duration;

use common::*;
use pools::*;

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
