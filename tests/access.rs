//! What launches touch: each launch path's operands attributed to the
//! blocks they fall in (a pointer inside a block names it), library calls'
//! operands read where their kernels hide them, steps found from the
//! repeating launch sequence or marked by the job, and the profile bounded
//! over a long run. Graphs' launches: `access_graphs.rs`.

#[path = "common/access.rs"]
mod access_of;
#[path = "common/command.rs"]
mod command;
mod common;

use access_of::*;
use command::*;
use common::*;

#[test]
fn every_runtime_launch_path_names_the_blocks_its_parameters_point_into() {
    let paths = RUNTIME_KERNEL_PATHS;
    let mut steps: Vec<String> = BLOCKS.iter().map(|s| s.to_string()).collect();
    // Pointers inside the blocks (a tensor inside its segment), held at
    // offsets 8 and 24 of a struct parameter, and a pointer parameter.
    for (how, _) in paths {
        steps.push(format!("kernel:{how}:src+4096:dst+1000:extra"));
    }
    steps.push("lasterror".into());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = client(Runtime::Fake13, &[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    for (how, api) in paths {
        assert_eq!(run.rc(&format!("kernel {how}")), 0);
        assert_eq!(coverage(&run, api), [1, 0, 0, 0], "{api}");
    }
    for name in ["src", "dst", "extra"] {
        assert_eq!(uses(&run, name), paths.len() as u64, "{name}");
    }
    assert_eq!(uses(&run, "idle"), 0);
    let src = block(&run, "src", "malloc src");
    assert_eq!(
        src["stream"], "0x51",
        "the stream of the launch, ExC's from its config"
    );
    assert_eq!(src["via"], serde_json::json!(["kernel"]));
    assert_eq!(
        run.rc("lasterror"),
        0,
        "asking for layouts leaves no error to the job"
    );
}

#[test]
fn every_driver_launch_path_names_its_blocks_also_from_a_packed_buffer() {
    let paths = DRIVER_KERNEL_PATHS;
    let mut steps: Vec<String> = BLOCKS.iter().map(|s| s.to_string()).collect();
    steps.push("fetch:proc".into());
    for (how, _) in paths {
        steps.push(format!("kernel:{how}:src:dst:extra"));
    }
    // cuLaunchKernelEx fetched by name, as cuBLAS gets it; cuLaunchKernel
    // with its arguments packed in `extra`.
    steps.push("kernel:fetched:src:dst:-".into());
    steps.push("kernel:extra:src:-:-".into());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    for (how, api) in paths {
        assert_eq!(run.rc(&format!("kernel {how}")), 0, "{how}");
        let expected = match how {
            "ex" => [2, 0, 0, 0],
            "cu" => [2, 0, 0, 0],
            _ => [1, 0, 0, 0],
        };
        assert_eq!(coverage(&run, api), expected, "{api}");
    }
    assert_eq!(uses(&run, "src"), 8);
    assert_eq!(uses(&run, "dst"), 7);
    assert_eq!(uses(&run, "extra"), 6);
    assert_eq!(uses(&run, "idle"), 0);
    assert_eq!(block(&run, "src", "malloc src")["stream"], "0x61");
}

#[test]
fn after_an_unload_a_reused_function_address_is_asked_about_again() {
    let mut steps: Vec<&str> = BLOCKS.to_vec();
    // Then the module goes, and another function of one parameter comes at
    // the same address: read with the old layout, the launch would name the
    // blocks of parameters it no longer has (and read past its arguments).
    steps.extend([
        "kernel:cu:src:dst:extra",
        "unload",
        "redescribe",
        "kernel:cu:src:dst:extra",
        // As CUDA unloads every module at exit, before the trace is written.
        "unload",
    ]);
    let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    assert_eq!(run.rc("unload"), 0);
    assert_eq!(coverage(&run, "cuLaunchKernel"), [1, 1, 0, 0]);
    assert_eq!(uses(&run, "src"), 1);
    assert_eq!(uses(&run, "extra"), 1);
    let access = &run.trace()["processes"][0]["access"];
    assert_eq!(
        (
            access["functions"].as_u64(),
            access["functions_described"].as_u64()
        ),
        (Some(1), Some(1)),
        "the function launched is still counted after the last unload"
    );
}

#[test]
fn a_launch_without_a_layout_passes_through_counted_as_undecoded() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:src:1M",
            "opaque:rt:src",
            "opaque:stub:src",
            "lasterror",
            "launch:graph",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("opaque rt"), 0, "the launch itself went through");
    assert_eq!(run.calls_with(&["cudaLaunchKernel"]).len(), 1);
    assert_eq!(coverage(&run, "cudaLaunchKernel"), [0, 0, 1, 0]);
    assert_eq!(coverage(&run, "__cudaLaunchKernel"), [0, 0, 1, 0]);
    assert_eq!(coverage(&run, "cudaGraphLaunch"), [0, 0, 1, 0]);
    assert_eq!(uses(&run, "src"), 0);
    assert_eq!(
        run.rc("lasterror"),
        0,
        "the failed query's error was cleared"
    );
    let access = access(&run);
    assert_eq!(
        access["functions"], 2,
        "one kernel launched two ways, and a graph"
    );
    assert_eq!(access["functions_described"], 0);
}

#[test]
fn a_library_calls_operands_name_its_blocks_and_its_kernels_count_inside_it() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:a:1M",
            "malloc:b:1M",
            "malloc:d:1M",
            "malloc:idle:1M",
            "matmul:a:b:d",
            "matmul:a+64:b:d",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("matmul"), 0);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["library_calls"]["cublasLtMatmul"], 2);
    assert_eq!(coverage(&run, "cublasLtMatmul"), [2, 0, 0, 0]);
    // cuBLASLt's own launch, seen by the shim, counted as made for the call.
    assert_eq!(coverage(&run, "cudaLaunchKernel"), [0, 0, 0, 2]);
    assert_eq!(process["launches"]["cudaLaunchKernel"], 2);
    assert!(process["launches"].get("cublasLtMatmul").is_none());
    for name in ["a", "b", "d"] {
        assert_eq!(uses(&run, name), 2, "{name}");
        let profile = block(&run, name, &format!("malloc {name}"));
        assert_eq!(profile["via"], serde_json::json!(["library"]));
        assert_eq!(profile["stream"], "0x52");
    }
    assert_eq!(uses(&run, "idle"), 0);
}

#[test]
fn cudnns_forwarded_calls_reach_its_own_parts_and_name_the_variant_packs_blocks() {
    // libcudnn.so.9 looks cudnnBackendExecute up in libcudnn_graph.so.9 and
    // calls it: handed the hook instead, it would call itself for ever.
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:x:1M",
            "malloc:w:1M",
            "malloc:y:1M",
            "malloc:ws:1M",
            "malloc:idle:1M",
            "conv:x:w+512:y:ws",
            "conv:x:w:y:ws",
        ],
    );
    run.assert_ok();
    assert_eq!(run.rc("conv"), 0);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["library_calls"]["cudnnBackendExecute"], 2);
    assert_eq!(coverage(&run, "cudnnBackendExecute"), [2, 0, 0, 0]);
    assert_eq!(
        coverage(&run, "cudaLaunchKernel"),
        [0, 0, 0, 2],
        "its kernel, inside the call"
    );
    for name in ["x", "w", "y", "ws"] {
        assert_eq!(uses(&run, name), 2, "{name}");
    }
    assert_eq!(uses(&run, "idle"), 0);
}

#[test]
fn a_batch_norm_call_passes_its_doubles_through_and_names_its_tensors() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:x:1M",
            "malloc:y:1M",
            "malloc:scale:4K",
            "bn:x:y:scale",
        ],
    );
    run.assert_ok();
    assert_eq!(
        run.rc("bn"),
        0,
        "factor, epsilon and sizes arrived as given"
    );
    assert_eq!(
        coverage(&run, "cudnnBatchNormalizationForwardTrainingEx"),
        [1, 0, 0, 0]
    );
    for name in ["x", "y", "scale"] {
        assert_eq!(uses(&run, name), 1, "{name}");
    }
}

fn via(run: &Run, name: &str) -> Vec<String> {
    block(run, name, &format!("malloc {name}"))["via"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn copies_and_memsets_name_the_blocks_they_touch_and_are_no_launches() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:a:1M",
            "malloc:b:1M",
            "malloc:idle:1M",
            "copyout:a:1",
            "memset:b:3:2",
            "sync",
            "hostbytes",
        ],
    );
    run.assert_ok();
    assert_eq!((run.rc("copyout"), run.rc("memset")), (0, 0));
    assert_eq!(
        (uses(&run, "a"), uses(&run, "b"), uses(&run, "idle")),
        (1, 1, 0)
    );
    assert_eq!(via(&run, "a"), ["copy"]);
    assert_eq!(coverage(&run, "cudaMemcpyAsync"), [1, 0, 0, 0]);
    assert_eq!(coverage(&run, "cudaMemsetAsync"), [1, 0, 0, 0]);
    let process = &run.trace()["processes"][0];
    assert_eq!(process["copies"]["cudaMemcpyAsync"], 1);
    assert!(
        process["launches"].get("cudaMemcpyAsync").is_none(),
        "a copy is not a kernel launch"
    );

    let run = driver_client(
        &[("VRAMSHARE_QUOTA", "32MiB")],
        &[
            "malloc:src:1M",
            "malloc:dst:1M",
            "malloc:set:1M",
            "dcopy:src:dst",
            "hcopy:src",
            "dset:set",
        ],
    );
    run.assert_ok();
    assert_eq!(
        (run.rc("dcopy"), run.rc("hcopy"), run.rc("dset")),
        (0, 0, 0)
    );
    assert_eq!(
        (uses(&run, "src"), uses(&run, "dst"), uses(&run, "set")),
        (2, 1, 1)
    );
    assert_eq!(coverage(&run, "cuMemcpyDtoDAsync_v2"), [1, 0, 0, 0]);
    assert_eq!(coverage(&run, "cuMemcpyHtoDAsync_v2"), [1, 0, 0, 0]);
    assert_eq!(coverage(&run, "cuMemsetD8Async"), [1, 0, 0, 0]);
}

#[test]
fn uses_of_a_spilled_block_are_counted_as_found_in_host_memory() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "2MiB")],
        &[
            "malloc:a:1M",
            "malloc:b:4M",
            "kernel:rt:a:b:-",
            "kernel:rt:a:b:-",
            "kernel:rt:b:-:-",
        ],
    );
    run.assert_ok();
    let a = block(&run, "a", "malloc a");
    let b = block(&run, "b", "malloc b");
    assert_eq!(b["placement"], "host", "b spilled");
    assert_eq!(
        (a["uses"].as_u64(), a["uses_in_host"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(
        (b["uses"].as_u64(), b["uses_in_host"].as_u64()),
        (Some(3), Some(3))
    );
    let access = &run.trace()["processes"][0]["access"];
    assert_eq!(
        (access["uses"].as_u64(), access["uses_in_host"].as_u64()),
        (Some(5), Some(3))
    );
    let trace = run.dir.path().join("spilled.json");
    std::fs::write(&trace, serde_json::to_string(run.trace()).unwrap()).unwrap();
    let report = vramshare(&["report", trace.to_str().unwrap()]);
    let stdout = text(&report.stdout);
    assert!(
        stdout.contains("uses of blocks: 5, 3 of them found their block in host memory (60%)"),
        "{stdout}"
    );
}

/// A step of a training loop, as launches: a kernel that runs once per step
/// (the step's mark), `hot` named twice and `warm` once by a described
/// kernel, and an opaque kernel.
const STEP: [&str; 4] = [
    "launch:rt",
    "kernel:rt:hot:warm:-",
    "kernel:rt:hot:-:-",
    "opaque:stub:hot",
];

#[test]
fn steps_are_found_from_the_repeating_sequence_and_blocks_ranked_by_use() {
    let mut steps = vec![
        "malloc:hot:4M",
        "malloc:warm:1M",
        "malloc:cold:8M",
        "kernel:rt:cold:-:-",
        "repeat:20:4",
    ];
    steps.extend(STEP);
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "64MiB"), ("FAKE_CUDA_LOG", "/dev/null")],
        &steps,
    );
    run.assert_ok();
    let access = access(&run);
    assert_eq!(access["step_launches"], 4, "{access}");
    assert_eq!(access["marked"], false);
    let found = access["steps"].as_u64().unwrap();
    assert!((15..=20).contains(&found), "{found} steps of 20");
    let step_uses =
        |name: &str| block(&run, name, &format!("malloc {name}"))["last_step"]["uses"].as_u64();
    assert_eq!(
        step_uses("hot"),
        Some(2),
        "the opaque kernel's pointer is not read"
    );
    assert_eq!(step_uses("warm"), Some(1));
    assert_eq!(step_uses("cold"), None, "used once, before the loop");
    let hot = block(&run, "hot", "malloc hot");
    assert_eq!(hot["last_step"]["first"], 1, "launches into the step");
    assert_eq!(hot["last_step"]["last"], 2);
    // Counted from the step the sequence was found at, to the last.
    assert_eq!(hot["steps_used"].as_u64().unwrap(), found);
    assert_eq!(hot["steps_alive"].as_u64().unwrap(), found);
    let bytes = &access["last_step"];
    assert_eq!(bytes["touched_bytes"], 5 << 20, "hot and warm");
    assert_eq!(bytes["live_bytes"], 13 << 20);

    // The report ranks them: hot first, cold last.
    let trace = run.dir.path().join("access.json");
    std::fs::write(&trace, serde_json::to_string(run.trace()).unwrap()).unwrap();
    let report = vramshare(&["report", trace.to_str().unwrap()]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let stdout = text(&report.stdout);
    let section = stdout
        .split("Access")
        .nth(1)
        .unwrap_or_else(|| panic!("no access section:\n{stdout}"));
    let position = |ptr: &str| {
        section
            .find(ptr)
            .unwrap_or_else(|| panic!("{ptr} not in:\n{section}"))
    };
    let (hot, warm, cold) = (
        run.field("malloc hot", "ptr"),
        run.field("malloc warm", "ptr"),
        run.field("malloc cold", "ptr"),
    );
    let hottest = section.split("Coldest").next().unwrap();
    assert!(
        hottest.find(&hot).unwrap() < hottest.find(&warm).unwrap(),
        "{section}"
    );
    assert!(
        section.split("Coldest").nth(1).unwrap().contains(&cold),
        "{section}"
    );
    let _ = position(&hot);
}

#[test]
fn steps_marked_by_the_job_replace_the_guess() {
    let mut steps = vec!["malloc:hot:1M", "repeat:5:5", "step"];
    steps.extend(STEP);
    let run = client(Runtime::Fake13, &[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    assert_eq!(run.field("step", "found"), "1");
    let access = access(&run);
    assert_eq!(access["marked"], true);
    assert_eq!(access["steps"], 5);
    assert_eq!(access["step_launches"], 0);
    assert_eq!(block(&run, "hot", "malloc hot")["last_step"]["uses"], 2);
}

#[test]
fn the_profile_stays_bounded_over_a_million_launches() {
    let run = client(
        Runtime::Fake13,
        &[("VRAMSHARE_QUOTA", "64MiB"), ("FAKE_CUDA_LOG", "/dev/null")],
        &[
            "malloc:hot:1M",
            "repeat:10000:1",
            "kernel:rt:hot:-:-",
            "rss",
            "repeat:1000000:1",
            "kernel:rt:hot:-:-",
            "rss",
            // A block that comes and goes at the same address keeps one
            // profile, as a tensor reallocated each step does.
            "repeat:20000:3",
            "malloc:churn:4K",
            "kernel:rt:churn:-:-",
            "free:churn",
            "rss",
        ],
    );
    run.assert_ok();
    let rss: Vec<u64> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("rss kib="))
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        rss[1] < rss[0] + 1024,
        "resident KiB after 10k and 1M launches: {rss:?}"
    );
    let access = access(&run);
    assert_eq!(block(&run, "hot", "malloc hot")["uses"], 1_010_000);
    let kept = access["blocks"].as_array().unwrap().len();
    assert!(kept <= 3, "{kept} profiles kept: {access}");
}

/// Where the job marks its steps, the trace keeps the last complete step's
/// uses in order, each with the number of events recorded before it: the
/// step's allocations, frees and uses fall back into the order the job made
/// them (what `bench/trace-loop` replays).
#[test]
fn the_last_marked_steps_uses_fall_in_order_among_its_events() {
    let steps = [
        "malloc:w:1M",
        "step",
        "repeat:3:6",
        // a is used right after it is made, before the launches' index
        // (rebuilt at most so often) takes it in: the ledger names it.
        "async:a:2M:1",
        "fill:w:1:1",
        "fill:a:2:1",
        "freeasync:a:1",
        "step",
    ];
    // Kernels taking time make the fake's stream-ordered frees wait for
    // the kernels queued before them, as a GPU's do.
    let env = [("VRAMSHARE_QUOTA", "32MiB"), ("FAKE_CUDA_KERNEL_US", "100")];
    let run = client(Runtime::Fake13, &env, &steps);
    run.assert_ok();
    let logged = &access(&run)["step_uses"];
    let uses = logged["uses"].as_array().expect("the last step's uses");
    let w = run.field("malloc w", "ptr");
    let named: Vec<&str> = uses.iter().map(|u| u[1][0].as_str().unwrap()).collect();
    assert_eq!(named.len(), 2, "two uses a step: {logged}");
    assert_eq!(hex(named[0]), hex(&w), "w is named first");
    let a = hex(named[1]);
    let seq_of = |op: &str| {
        run.events(op)
            .iter()
            .filter(|e| ptr_of(e) == a)
            .map(|e| e["seq"].as_u64().unwrap())
            .collect::<Vec<u64>>()
    };
    let before = uses[1][0].as_u64().unwrap();
    // The use of a comes after some allocation of a and before the free
    // that follows it.
    let made = seq_of("alloc").into_iter().filter(|&s| s < before).max();
    let freed = seq_of("free").into_iter().filter(|&s| s >= before).min();
    let (made, freed) = (
        made.expect("a made before its use"),
        freed.expect("a freed after"),
    );
    assert!(
        seq_of("free").iter().all(|&s| s < made || s >= freed),
        "no free of a between its allocation ({made}) and its use ({before})"
    );
    assert!(uses[0][0].as_u64().unwrap() <= before, "in the job's order");
    let (began, ended) = (
        logged["events_began"].as_u64(),
        logged["events_ended"].as_u64(),
    );
    assert!(
        began <= Some(made) && Some(freed) < ended,
        "a made and freed within the step: {logged}"
    );
}
