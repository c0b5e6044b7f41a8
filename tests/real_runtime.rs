//! NVIDIA's real `libcudart.so.13` on a machine with no GPU driver: every
//! call fails for lack of a driver, and the shim must hand those errors to
//! the program exactly as the runtime gave them, without crashing.

mod common;

use common::*;

#[test]
fn driver_errors_pass_through_unchanged() {
    let Some(cu13) = nvidia_runtime() else { return };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-real13");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libcudart.so", "libcudart.so.13"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(cu13.join("lib/libcudart.so.13"), &link).unwrap();
    }
    build_clients(&dir);
    let steps = [
        "meminfo",
        "malloc:a:1M",
        "managed:b:1M",
        "async:c:1M",
        "pitch:d:100:10",
        "m3d:e:100:10:10",
        "free:0x1000",
        "free:0",
    ];
    let bare = run_in(&dir, "client", &steps, &[], false);
    bare.assert_ok();
    let rc = bare.rc("malloc a");
    assert!(
        rc == 35 || rc == 100,
        "no driver here, so no device: rc {rc}\n{}",
        bare.stdout
    );
    for quota in ["1GiB", "50%", "0=1MiB"] {
        let run = run_in(&dir, "client", &steps, &[("VRAMSHARE_QUOTA", quota)], true);
        run.assert_ok();
        assert_eq!(
            run.stdout, bare.stdout,
            "quota {quota}: the program sees the runtime's own answers"
        );
    }
}
