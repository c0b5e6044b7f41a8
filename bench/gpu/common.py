"""What the benchmark jobs share: options, the allocator choice, timing and
the one JSON line each job prints."""
import argparse
import json
import os
import sys
import time

import torch


def options(description, steps):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="timed steps (after 2 warm-up steps)")
    parser.add_argument("--managed", metavar="UM_ALLOC_SO",
                        help="every allocation through PyTorch's pluggable allocator in this library (the anchor)")
    parser.add_argument("--fraction", type=float, help="torch.cuda.set_per_process_memory_fraction (the other anchor)")
    parser.add_argument("--expect-oom", action="store_true", help="succeed only on torch.cuda.OutOfMemoryError")
    args = parser.parse_args()
    if args.managed:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(args.managed, "um_alloc", "um_free")
        torch.cuda.memory.change_current_allocator(allocator)
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
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
    torch.use_deterministic_algorithms(True, warn_only=True)
    return args


def report_oom(job, args, error):
    print(json.dumps({"job": job, "oom": True, "message": str(error).splitlines()[0][:200],
                      "mem_get_info": list(torch.cuda.mem_get_info())}), flush=True)
    os._exit(0 if args.expect_oom else 1)


def run(job, args, step, extra=None):
    """Runs 2 warm-up and `args.steps` timed steps of `step()` (which returns a
    float to compare between runs) and prints the job's JSON line."""
    free, total = torch.cuda.mem_get_info()
    values, times = [], []
    try:
        for i in range(args.steps + 2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            values.append(step())
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError as error:
        report_oom(job, args, error)
    if args.expect_oom:
        print(json.dumps({"job": job, "oom": False}), flush=True)
        sys.exit(1)
    timed = times[2:]
    line = {
        "job": job,
        "step_ms": 1e3 * sum(timed) / len(timed),
        "step_ms_min": 1e3 * min(timed),
        "values": values,
        "mem_get_info": [free, total],
        "max_reserved": torch.cuda.max_memory_reserved() if not args.managed else None,
        "max_allocated": torch.cuda.max_memory_allocated() if not args.managed else None,
        "pid": os.getpid(),
    }
    line.update(extra or {})
    print(json.dumps(line), flush=True)
