//! Kernel launches through every path a job takes (the runtime's calls and
//! host stubs, the driver's calls linked or fetched by name, graphs): each
//! reaches CUDA once, unchanged, and is counted by the call that made it.

mod common;

use common::*;

/// The launches the trace counted, by call.
fn counted(run: &Run) -> Vec<(String, u64)> {
    run.trace()["processes"][0]["launches"]
        .as_object()
        .map(|launches| {
            launches
                .iter()
                .map(|(api, n)| (api.clone(), n.as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_runtime_launch_path_reaches_cuda_once_and_is_counted() {
    let graphs = [
        ("graph", "cudaGraphLaunch"),
        ("graph_ptsz", "cudaGraphLaunch_ptsz"),
    ];
    let paths: Vec<(&str, &str)> = RUNTIME_KERNEL_PATHS.into_iter().chain(graphs).collect();
    let mut steps: Vec<String> = paths
        .iter()
        .map(|(how, _)| format!("launch:{how}"))
        .collect();
    steps.push("launch:stub".into());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    for &(how, api) in &paths {
        assert_eq!(run.rc(&format!("launch {how}")), 0, "{how}");
        let expected = if how == "stub" { 2 } else { 1 };
        assert_eq!(
            run.calls_with(&[api]).len(),
            expected,
            "{api} reached the fake {expected} time(s): {:?}",
            run.calls
        );
    }
    let mut expected: Vec<(String, u64)> = paths
        .iter()
        .map(|(how, api)| (api.to_string(), if *how == "stub" { 2 } else { 1 }))
        .collect();
    expected.sort();
    assert_eq!(counted(&run), expected);
}

#[test]
fn every_driver_launch_path_is_counted_also_when_fetched_by_name() {
    let graphs = [
        ("graph", "cuGraphLaunch"),
        ("graph_ptsz", "cuGraphLaunch_ptsz"),
    ];
    let paths: Vec<(&str, &str)> = DRIVER_KERNEL_PATHS.into_iter().chain(graphs).collect();
    let mut steps: Vec<String> = paths
        .iter()
        .map(|(how, _)| format!("launch:{how}"))
        .collect();
    // cuLaunchKernelEx as cuBLAS gets it: fetched with cuGetProcAddress.
    steps.push("fetch:proc".into());
    steps.push("launch:fetched".into());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    assert_eq!(run.rc("launch fetched"), 0);
    let mut expected: Vec<(String, u64)> = paths
        .iter()
        .map(|(how, api)| (api.to_string(), if *how == "ex" { 2 } else { 1 }))
        .collect();
    expected.sort();
    assert_eq!(counted(&run), expected, "{:?}", run.calls);
    assert_eq!(
        run.calls_with(&["cuLaunchKernelEx"]).len(),
        2,
        "{:?}",
        run.calls
    );
}

#[test]
fn a_launch_without_a_device_gets_cudas_own_answer() {
    let run = client(
        Runtime::Fake13,
        &[("FAKE_CUDA_NO_DEVICE", "1")],
        &["launch:stub"],
    );
    assert_eq!(run.rc("launch stub"), 100, "cudaErrorNoDevice, unchanged");
}

#[test]
fn a_launch_of_an_extension_built_for_another_runtime_reaches_that_runtime() {
    // Two fake runtimes in one process, each with its own module; each
    // refuses the other's kernels, as the real ones do.
    let dirs = [fake_dir(Runtime::Fake12), fake_dir(Runtime::Fake13)];
    let modules: Vec<String> = dirs
        .iter()
        .map(|dir| {
            let module = format!(
                "launch_module_{}.so",
                dir.file_name().unwrap().to_string_lossy()
            );
            program_as(
                dir,
                "two_runtimes",
                &module,
                &["-shared", "-fPIC", "-DMODULE"],
                &["-lcudart"],
            );
            dir.join(module).to_string_lossy().into_owned()
        })
        .collect();
    program_as(dirs[1], "two_runtimes", "two_runtimes", &[], &["-ldl"]);
    let args: Vec<&str> = modules.iter().map(String::as_str).collect();
    for preload in [false, true] {
        let run = run_in(
            dirs[1],
            "two_runtimes",
            &args,
            &[("VRAMSHARE_QUOTA", "32MiB")],
            preload,
        );
        run.assert_ok();
        assert_eq!(run.rc("module 1"), 0, "preload {preload}: {:?}", run.calls);
        assert_eq!(run.rc("module 2"), 0, "preload {preload}: {:?}", run.calls);
        let took: Vec<String> = run
            .calls_with(&["cudaLaunchKernel", "rc=0"])
            .iter()
            .map(|call| log_field(call, "runtime"))
            .collect();
        assert_eq!(
            took,
            ["12", "13"],
            "each module's own runtime launched it: {:?}",
            run.calls
        );
    }
}

#[test]
fn a_function_the_driver_has_not_at_the_version_asked_stays_absent() {
    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "probe:cuLaunchKernelEx:11000",
            "probe:cuLaunchKernelEx:13000",
        ],
    );
    run.assert_ok();
    assert_eq!(
        run.line("probe cuLaunchKernelEx rc=0 found=0"),
        "probe cuLaunchKernelEx rc=0 found=0 status=2",
        "no hook where the driver has no function: {}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("probe cuLaunchKernelEx rc=0 found=1 status=0"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_running_processs_launches_reach_its_registry_slot() {
    let work = tempfile::tempdir().unwrap();
    let shm = work.path().join("shm");
    let mut steps = vec!["malloc:a:1M"];
    steps.extend(std::iter::repeat_n("launch:stub", 300));
    steps.push("sleep:1500");
    let child = client_command(&shm, &[("VRAMSHARE_QUOTA", "32MiB")], &steps)
        .spawn()
        .unwrap();
    let pid = child.id();
    let launches = || {
        vramshare_common::files::open_existing::<vramshare_common::registry::RegistryFile>(&shm)
            .ok()
            .and_then(|map| vramshare_common::registry::Registry::new(map).ok())
            .and_then(|registry| registry.live().into_iter().find(|p| p.pid == pid))
            .map(|p| p.launches)
    };
    let start = std::time::Instant::now();
    while launches() != Some(300) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "the registry never showed 300 launches: {:?}",
            launches()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(child.wait_with_output().unwrap().status.success());
}

/// The fake runtime runs each stream's work on a thread of its own, each
/// item 50 ms after it is reached; `other` keeps stream 1 busy first, so
/// that its fill of `buf` lands after stream 2 has run its copy.
fn ordered_by_stream(ordering: &[&'static str], preload: bool) -> Run {
    let mut steps = vec![
        "malloc:buf:64K",
        "malloc:other:64K",
        "fill:other:1:1",
        "fill:buf:7:1",
    ];
    steps.extend_from_slice(ordering);
    steps.extend(["copyout:buf:2", "sync", "hostbytes"]);
    let env = [
        ("VRAMSHARE_QUOTA", "32MiB"),
        ("FAKE_CUDA_STREAM_DELAY_US", "50000"),
    ];
    let run = run_in(fake_dir(Runtime::Fake13), "client", &steps, &env, preload);
    run.assert_ok();
    for step in ["fill buf", "copyout", "sync"] {
        assert_eq!(run.rc(step), 0, "{step}");
    }
    run
}

#[test]
fn streams_and_events_order_the_jobs_work_under_the_shim_as_without_it() {
    for preload in [false, true] {
        // Unordered, the copy on stream 2 runs before the fill on stream 1:
        // the fake shows an ordering bug where a GPU could.
        let run = ordered_by_stream(&[], preload);
        assert_eq!(
            log_field(run.line("hostbytes"), "first"),
            "0",
            "preload {preload}"
        );
        // An event recorded after the fill, waited for by stream 2, orders
        // the copy after it.
        let run = ordered_by_stream(&["record:1", "waitevent:2"], preload);
        assert_eq!(
            (
                log_field(run.line("hostbytes"), "first"),
                log_field(run.line("hostbytes"), "last")
            ),
            ("7".into(), "7".into()),
            "preload {preload}"
        );
    }
}
