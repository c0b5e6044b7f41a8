//! What graphs' launches touch: what their kernels named when the graph was
//! captured (through the runtime or the driver, begun by name or by a
//! lookup), or what its kernel nodes and child graphs name when it was
//! built node by node, read again when it changes.

#[path = "common/access.rs"]
mod access_of;
mod common;

use access_of::*;
use common::*;

#[test]
fn a_graphs_launches_name_what_its_kernels_named_when_it_was_captured() {
    // Made with flags, or with parameters.
    for instantiate in ["instantiate", "instantiate:params"] {
        let run = client(
            Runtime::Fake13,
            &[("VRAMSHARE_QUOTA", "32MiB")],
            &[
                "malloc:src:1M",
                "malloc:dst:1M",
                "malloc:idle:1M",
                // Captured on stream 0x51: the kernel does not run now.
                "capture",
                "kernel:rt:src:dst:-",
                "endcapture",
                instantiate,
                "replay",
                "replay",
                "replay",
                "destroy",
                "replay",
            ],
        );
        run.assert_ok();
        for step in ["capture", "endcapture", "instantiate", "replay", "destroy"] {
            assert_eq!(run.rc(step), 0, "{instantiate}: {step}");
        }
        // Captured, not run: no use then; each of the three replays is one.
        assert_eq!(uses(&run, "src"), 3, "{instantiate}");
        assert_eq!(uses(&run, "dst"), 3, "{instantiate}");
        assert_eq!(uses(&run, "idle"), 0, "{instantiate}");
        assert_eq!(
            coverage(&run, "cudaLaunchKernel"),
            [1, 0, 0, 0],
            "{instantiate}: the captured launch named its blocks"
        );
        // The launch after the executable graph was destroyed names nothing.
        assert_eq!(
            coverage(&run, "cudaGraphLaunch"),
            [3, 0, 1, 0],
            "{instantiate}"
        );
    }
}

#[test]
fn a_graph_captured_through_the_driver_names_its_blocks_also_when_begun_by_a_lookup() {
    // Made with flags, or with parameters.
    let ways = [
        ("link", "instantiate"),
        ("fetched", "instantiate"),
        ("link", "instantiate:params"),
    ];
    for (how, instantiate) in ways {
        let capture = format!("capture:{how}");
        let mut steps: Vec<&str> = BLOCKS.to_vec();
        steps.extend([
            capture.as_str(),
            "kernel:cu:src:dst:-",
            "endcapture",
            instantiate,
        ]);
        steps.extend(["replay", "replay", "destroy", "replay"]);
        let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
        run.assert_ok();
        let how = format!("{how}, {instantiate}");
        assert_eq!(run.rc("capture"), 0, "{how}");
        assert_eq!(run.rc("instantiate"), 0, "{how}");
        assert_eq!(
            uses(&run, "src"),
            2,
            "{how}: the two replays, not the capture"
        );
        assert_eq!(uses(&run, "dst"), 2, "{how}");
        assert_eq!(uses(&run, "idle"), 0, "{how}");
        assert_eq!(coverage(&run, "cuGraphLaunch"), [2, 0, 1, 0], "{how}");
    }
}

#[test]
fn a_graph_built_node_by_node_names_what_its_kernel_nodes_and_child_graphs_name() {
    let mut steps: Vec<&str> = BLOCKS.to_vec();
    steps.extend([
        "nodes:src:dst:extra",
        "instantiate",
        "replay",
        "replay",
        // The graph destroyed: its executable graph still names its blocks.
        "graphdestroy",
        "replay",
        "destroy",
        "replay",
    ]);
    let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    for step in ["nodes", "instantiate", "graphdestroy", "destroy"] {
        assert_eq!(run.rc(step), 0, "{step}");
    }
    // Read from the driver's copies of the arguments (the client's own were
    // gone once the nodes were added), the child graph's included.
    assert_eq!(uses(&run, "src"), 3);
    assert_eq!(uses(&run, "dst"), 3);
    assert_eq!(uses(&run, "extra"), 3, "named by the child graph's node");
    assert_eq!(uses(&run, "idle"), 0);
    assert_eq!(coverage(&run, "cuGraphLaunch"), [3, 0, 1, 0]);
}

#[test]
fn a_graph_changed_after_an_instantiation_is_read_again_at_the_next() {
    let mut steps: Vec<&str> = BLOCKS.to_vec();
    steps.extend([
        "nodes:src:-:-",
        "instantiate",
        "replay",
        "addnode:dst",
        "instantiate",
        "replay",
    ]);
    let run = driver_client(&[("VRAMSHARE_QUOTA", "32MiB")], &steps);
    run.assert_ok();
    assert_eq!(run.rc("addnode"), 0);
    assert_eq!(uses(&run, "src"), 2);
    assert_eq!(
        uses(&run, "dst"),
        1,
        "named by the node added before the second"
    );
}
