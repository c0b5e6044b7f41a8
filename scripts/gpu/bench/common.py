"""What the benchmark jobs share: options, the allocator choice, timing and
the one JSON line each job prints."""
import argparse
import bisect
import ctypes
import json
import os
import sys
import threading
import time

import torch


def options(description, steps):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--managed", metavar="UM_ALLOC_SO",
                        help="every allocation through PyTorch's pluggable allocator in this library (the anchor)")
    parser.add_argument("--save-on-cpu", action="store_true",
                        help="PyTorch's own activation offload: tensors saved for the backward pass kept in pinned host memory (an anchor)")
    parser.add_argument("--fraction", type=float, help="torch.cuda.set_per_process_memory_fraction (the other anchor)")
    parser.add_argument("--expect-oom", action="store_true", help="succeed only on torch.cuda.OutOfMemoryError")
    parser.add_argument("--traffic", action="store_true",
                        help="sample the GPU's PCIe traffic (NVML) during the timed steps")
    parser.add_argument("--mark", action="store_true",
                        help="mark each step for the shim (vramshare_step) instead of letting it find them")
    parser.add_argument("--strict", action="store_true",
                        help="deterministic algorithms only (an op without one raises), for comparing losses bit for bit")
    parser.add_argument("--timeline", action="store_true",
                        help="after the timed steps, one more under PyTorch's profiler: what the device did in it")
    parser.add_argument("--touched", metavar="FILE",
                        help="after the timed steps, one more, with PyTorch's account of the memory it uses in FILE")
    args = parser.parse_args()
    if args.managed:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(args.managed, "um_alloc", "um_free")
        torch.cuda.memory.change_current_allocator(allocator)
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    if args.save_on_cpu:
        # Entered for the whole run: every step's saved tensors go to the host.
        torch.autograd.graph.save_on_cpu(pin_memory=True).__enter__()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    # An out-of-memory error while the job is built (a large table, say)
    # ends the job the same way as one in a step.
    previous = sys.excepthook

    def on_error(kind, error, traceback):
        if issubclass(kind, torch.cuda.OutOfMemoryError):
            report_oom(os.path.basename(sys.argv[0]).removesuffix(".py"), args, error)
        previous(kind, error, traceback)

    sys.excepthook = on_error
    torch.use_deterministic_algorithms(True, warn_only=not args.strict)
    return args


def report_oom(job, args, error):
    print(json.dumps({"job": job, "oom": True, "message": str(error).splitlines()[0][:200],
                      "mem_get_info": list(torch.cuda.mem_get_info())}), flush=True)
    os._exit(0 if args.expect_oom else 1)


class LinkTraffic:
    """Samples the GPU's PCIe throughput through NVML while running: each
    reading covers 20 ms; rx is what the GPU receives (its reads of host
    memory), tx what it sends (its writes to host memory)."""

    def __init__(self, device=0):
        self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
        self.nvml.nvmlInit_v2()
        self.handle = ctypes.c_void_p()
        self.nvml.nvmlDeviceGetHandleByIndex_v2(device, ctypes.byref(self.handle))
        self.samples = {0: [], 1: []}  # NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES
        self.running = False

    def _sample(self):
        value = ctypes.c_uint()
        while self.running:
            for counter in (0, 1):
                if self.nvml.nvmlDeviceGetPcieThroughput(self.handle, counter, ctypes.byref(value)) == 0:
                    self.samples[counter].append(value.value * 1e3)  # KB/s to B/s

    def start(self):
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def stop(self):
        self.running = False
        self.thread.join()
        mean = lambda xs: sum(xs) / len(xs) if xs else None
        return {"tx_Bps": mean(self.samples[0]), "rx_Bps": mean(self.samples[1]), "samples": len(self.samples[1])}


def step_marker(args):
    """The shim's step marker when asked for and the shim is loaded (the
    name is absent otherwise), else None."""
    return getattr(ctypes.CDLL(None), "vramshare_step", None) if args.mark else None


def record_touched(step, path, marker):
    """One more step, and PyTorch's own account of the memory it uses, for
    comparison with the shim's (and independent of it): the caching
    allocator's segments that hold a live tensor at some time during the
    step, those holding one when it begins and those it allocates into.
    Written to `path` as {"segments": [{"address", "size", "touched"}]}."""
    torch.cuda.synchronize()
    live = {}
    for segment in torch.cuda.memory_snapshot():
        active = any(b["state"] != "inactive" for b in segment["blocks"])
        live[segment["address"]] = [segment["total_size"], active]
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=1_000_000)
    if marker:
        marker()
    step()
    torch.cuda.synchronize()
    if marker:
        marker()  # the step just run is now the shim's latest complete one
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    segments = sorted((s["address"], s["total_size"]) for s in snapshot["segments"])
    for address, size in segments:
        live.setdefault(address, [size, False])
    starts = [address for address, _ in segments]
    for entry in (e for trace in snapshot["device_traces"] for e in trace):
        if entry["action"] == "segment_alloc":
            # A segment made during the step, held for an allocation in it
            # (and maybe released before its end).
            live[entry["addr"]] = [entry["size"], True]
        if entry["action"] != "alloc":
            continue
        at = bisect.bisect_right(starts, entry["addr"]) - 1
        if at >= 0 and entry["addr"] < segments[at][0] + segments[at][1]:
            live[segments[at][0]][1] = True
    with open(path, "w") as out:
        json.dump({"segments": [{"address": a, "size": s, "touched": t} for a, (s, t) in live.items()]}, out)


def union(intervals):
    """The merged (begin, end) spans that `intervals` cover, in order."""
    merged = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return merged


def covered(spans):
    return sum(end - begin for begin, end in spans)


def intersection(a, b):
    """The time two merged span lists cover together."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# The width of a profiled step's phases, ms.
PHASE_MS = 5


def clipped(spans, begin, end):
    """The time of `spans` within [begin, end), each counted (merged spans:
    the time they cover)."""
    return sum(max(0, min(e, end) - max(b, begin)) for b, e in spans)


def phases(first, last, kernels, streams, host):
    """The profiled step in slices of PHASE_MS from its first device event:
    in each, the ms kernels ran, the ms each stream that ran only copies
    was busy (the shim's two, one a direction, and the job's own), the ms
    the host's threads spent inside allocations (where an allocation
    waits for room), frees, launches (where a launch waits for its blocks),
    and the launches begun; so that a slow step says in which part it lost
    its time, and whether the device waited for the host or for copies."""
    copy_streams = {key: union(v["copies"]) for key, v in streams.items() if v["copies"] and not v["kernels"]}
    kinds = {"alloc_ms": ("cudaMallocAsync", "cuMemAllocAsync", "cudaMalloc", "cuMemAlloc"),
             "free_ms": ("cudaFreeAsync", "cuMemFreeAsync", "cudaFree", "cuMemFree"),
             "launch_ms": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")}
    calls = {field: [(b, e) for name, b, e in host if name in names] for field, names in kinds.items()}
    slices = []
    begin = first
    while begin < last:
        end = begin + PHASE_MS
        entry = {"from_ms": round(begin - first, 1), "kernels_ms": round(clipped(kernels, begin, end), 2),
                 "copy_streams_ms": {key: round(clipped(spans, begin, end), 2) for key, spans in copy_streams.items()},
                 "launches": sum(1 for b, _ in calls["launch_ms"] if begin <= b < end)}
        for field, spans in calls.items():
            entry[field] = round(clipped(spans, begin, end), 2)
        slices.append(entry)
        begin = end
    return slices


def host_calls(events, most=12):
    """Where the host's threads spent their time inside CUDA in a profiled
    step: the runtime's and driver's calls the profiler saw (on every
    thread, the shim's too), as {"NAME on thread TID": [ms, calls]}, the
    costliest `most`."""
    calls = {}
    for event in events:
        if "CUDA" in str(getattr(event, "device_type", "")) or not event.name.startswith("cu"):
            continue
        entry = calls.setdefault(f"{event.name} on thread {getattr(event, 'thread', '?')}", [0.0, 0])
        entry[0] += (event.time_range.end - event.time_range.start) / 1e3
        entry[1] += 1
    costliest = sorted(calls.items(), key=lambda kv: -kv[1][0])[:most]
    return {name: [round(ms, 1), count] for name, (ms, count) in costliest}


def device_timeline(step, marker):
    """One more step under PyTorch's profiler (CUPTI sees every stream of
    the process, the shim's copies too). What the device did in it, in ms:
    the step's span on the host, the time kernels ran, copies ran, both at
    once, and neither; and each stream's busy time, kernels and copies
    apart (a stream that ran only copies is the job's or the shim's); and
    the host's costliest CUDA calls ([`host_calls`])."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if marker:
            marker()
        begin = time.perf_counter()
        step()
        torch.cuda.synchronize()
        span = time.perf_counter() - begin
    kernels, copies, streams, host = [], [], {}, []
    for event in prof.events():
        kind = str(getattr(event, "device_type", ""))
        if "CUDA" not in kind:
            if event.name.startswith("cu"):
                host.append((event.name, event.time_range.start / 1e3, event.time_range.end / 1e3))
            continue
        start = event.time_range.start / 1e3
        end = event.time_range.end / 1e3
        name = event.name
        is_copy = name.startswith("Memcpy") or name.startswith("Memset")
        (copies if is_copy else kernels).append((start, end))
        key = f"{event.device_resource_id}"
        entry = streams.setdefault(key, {"kernels": [], "copies": [], "copy_names": {}})
        entry["copies" if is_copy else "kernels"].append((start, end))
        if is_copy:
            entry["copy_names"][name] = entry["copy_names"].get(name, 0) + 1
    k, c = union(kernels), union(copies)
    everything = union(kernels + copies)
    try:
        calls = host_calls(prof.events())
    except Exception as error:  # a diagnostic: the device's figures still count
        calls = {"error": repr(error)[:200]}
    first = everything[0][0] if everything else 0
    last = everything[-1][1] if everything else 0
    return {
        "span_ms": 1e3 * span,
        "device_span_ms": last - first,
        "kernels_ms": covered(k),
        "copies_ms": covered(c),
        "both_ms": intersection(k, c),
        "idle_ms": (last - first) - covered(everything),
        "kernel_count": len(kernels),
        "phases": phases(first, last, k, streams, host),
        "host_calls": calls,
        "streams": {
            key: {
                "kernels_ms": covered(union(v["kernels"])),
                "copies_ms": covered(union(v["copies"])),
                "copy_names": v["copy_names"],
            }
            for key, v in streams.items()
        },
    }


def run(job, args, step, extra=None):
    """Runs 2 warm-up and `args.steps` timed steps of `step()` (which returns a
    float to compare between runs) and prints the job's JSON line. With
    --mark each step is marked for the shim as it begins; with --touched one
    more step follows, measured by PyTorch (`record_touched`)."""
    free, total = torch.cuda.mem_get_info()
    marker = step_marker(args)
    if marker:
        unmarked = step

        def step():
            marker()
            return unmarked()
    values, times, began, bounds = [], [], [], []
    traffic = LinkTraffic() if args.traffic else None
    try:
        for i in range(args.steps + 2):
            if i == 2 and traffic:
                traffic.start()
            torch.cuda.synchronize()
            began.append(time.time())
            bounds.append(time.monotonic_ns())
            start = time.perf_counter()
            values.append(step())
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        bounds.append(time.monotonic_ns())
    except torch.cuda.OutOfMemoryError as error:
        report_oom(job, args, error)
    link = traffic.stop() if traffic else None
    plain = unmarked if marker else step
    timeline = None
    if args.timeline:
        try:
            timeline = device_timeline(plain, marker)
        except Exception as error:  # the profiler is a diagnostic: the job's line still prints
            timeline = {"error": repr(error)[:200]}
    if args.touched:
        record_touched(plain, args.touched, marker)
    if args.expect_oom:
        print(json.dumps({"job": job, "oom": False}), flush=True)
        sys.exit(1)
    timed = times[2:]
    line = {
        "job": job,
        "step_ms": 1e3 * sum(timed) / len(timed),
        "step_ms_min": 1e3 * min(timed),
        "step_ms_each": [1e3 * t for t in timed],
        "step_began": began[2:],  # wall-clock seconds, to line up with other records
        # CLOCK_MONOTONIC ns at the first timed step's start and the last's
        # end, as the shim's trace stamps its samples of the moves.
        "timed_ns": [bounds[2], bounds[-1]] if len(bounds) > 3 else None,
        "values": values,
        "mem_get_info": [free, total],
        "max_reserved": torch.cuda.max_memory_reserved() if not args.managed else None,
        "max_allocated": torch.cuda.max_memory_allocated() if not args.managed else None,
        "pid": os.getpid(),
        "marked": marker is not None,
    }
    if link and link["rx_Bps"] is not None:
        # Bytes over the link per step, from the mean rates over the timed steps.
        seconds = sum(timed) / len(timed)
        line["link_rx_bytes_per_step"] = link["rx_Bps"] * seconds
        line["link_tx_bytes_per_step"] = link["tx_Bps"] * seconds
        line["link_samples"] = link["samples"]
    if timeline:
        line["timeline"] = timeline
    line.update(extra or {})
    print(json.dumps(line), flush=True)
