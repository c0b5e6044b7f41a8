//! A launch that fails as a kernel's fault does, while the spill tier holds
//! blocks: the job gets CUDA's error as it was, and the shim says once what
//! the tier was doing (where the launch's blocks were, its last moves), so
//! that a fault that met a move can be told from the job's own.

mod common;

use common::*;

#[test]
fn a_fault_while_blocks_move_is_said_once_with_the_tiers_last_moves() {
    // Two blocks of 4 MiB fit the quota, a third does not: filling them in
    // turn moves one in and another out. From the fifth launch on, every
    // launch fails with an illegal address, as after a kernel's fault.
    let mut steps = THIRD_COMES_IN.to_vec();
    steps.extend(["fill:a:4:1", "fill:b:5:1", "fill:c:6:1"]);
    let env = moving_beside("8MiB", &[("FAKE_CUDA_FAULT_AFTER", "5")]);
    let run = client(Runtime::Fake13, &env, &steps);
    // The job sees CUDA's own error, each time.
    let rcs: Vec<i32> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("fill "))
        .map(|l| log_field(l, "rc").parse().unwrap())
        .collect();
    assert_eq!(rcs, [0, 0, 0, 0, 700, 700], "{}", run.stdout);
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("as a kernel's fault does"))
        .collect();
    assert_eq!(said.len(), 1, "{}\n{}", run.stderr, run.stdout);
    let line = said[0];
    assert!(
        line.contains("cudaLaunchKernel failed with error 700"),
        "{line}"
    );
    // The failed launch named b, whose address the message gives, and the
    // moves that made room for c and a are listed, newest first.
    let b = run.field("malloc b", "ptr");
    assert!(line.contains(&format!("Blocks it named: {b} ")), "{line}");
    let moves = line.split("newest first: ").nth(1).unwrap();
    assert!(moves.matches(" in ").count() >= 2, "{line}");
    assert!(moves.matches(" out ").count() >= 2, "{line}");
    assert!(line.contains("VRAMSHARE_MOVES=on"), "{line}");
}

#[test]
fn a_failed_launch_without_the_tier_is_not_said() {
    // Nothing over the quota: the tier holds nothing, and a failed launch
    // is the job's affair alone.
    let steps = ["malloc:a:4M", "fill:a:1:1", "fill:a:2:1"];
    let env = [
        ("VRAMSHARE_QUOTA", "8MiB"),
        ("FAKE_CUDA_DEVICES", "1"),
        ("FAKE_CUDA_FAULT_AFTER", "2"),
    ];
    let run = client(Runtime::Fake13, &env, &steps);
    assert!(run.stdout.contains("fill a rc=700"), "{}", run.stdout);
    assert!(!run.stderr.contains("kernel's fault"), "{}", run.stderr);
}
