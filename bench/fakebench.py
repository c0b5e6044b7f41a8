"""What bench/fake-training and bench/trace-loop share: building the fake
runtime and its client, one run of a client program natively or under a
build of the shim, and the comparison of builds over rounds in rotating
order, printed as a table.

A loop is the client's arguments (setup, then `repeat:N:K` and a step of K
client steps beginning with `step`) and its peak in MiB; costs are the fake
runtime's variables (tests/fake/streams.h, tests/fake/costs.h).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "bench" / "fake-training"
MIB = 1 << 20
# The fake's device memory is malloc's: kept in the heap once freed, so
# that a native run's blocks made again each step do not fault their pages
# in again (the shim's kept blocks keep theirs).
MALLOC_TUNING = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296",
}


def sh(*args):
    subprocess.run(args, check=True, cwd=ROOT)


def build():
    """The shim, the fake runtime and driver, and the test client; the
    shim's path."""
    sh("cargo", "build", "--release", "--quiet", "-p", "vramshare-shim")
    metadata = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                              check=True, cwd=ROOT, capture_output=True, text=True)
    shim = Path(json.loads(metadata.stdout)["target_directory"]) / "release" / "libvramshare.so"
    OUT.mkdir(parents=True, exist_ok=True)
    fake = ROOT / "tests" / "fake"
    (OUT / "cudart.map").write_text(
        "libcudart.so.13 { global: cuda*; __cuda*; local: *; };\n"
    )
    sh("cc", "-O2", "-shared", "-fPIC", "-DFAKE_CUDA_MAJOR=13",
       "-o", str(OUT / "libcudart.so.13"), str(fake / "cudart.c"),
       "-Wl,-soname,libcudart.so.13",
       f"-Wl,--version-script,{OUT / 'cudart.map'}", "-lpthread")
    sh("cc", "-O2", "-shared", "-fPIC", "-o", str(OUT / "libcuda.so.1"),
       str(fake / "cuda.c"), "-Wl,-soname,libcuda.so.1", "-lpthread", "-ldl")
    for name, target in [("libcudart.so", "libcudart.so.13"), ("libcuda.so", "libcuda.so.1")]:
        link = OUT / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    sh("cc", "-O2", "-DNO_CUBLASLT", "-o", str(OUT / "client"),
       str(ROOT / "tests" / "clients" / "client.c"),
       f"-I{ROOT / 'tests' / 'clients'}", f"-L{OUT}", f"-Wl,-rpath,{OUT}",
       "-lcudart", "-lpthread", "-ldl")
    return shim


def builds_named(args, this, prog):
    """The builds named on the command line as NAME=PATH[@MOVES], as
    (name, path, moves); this tree's build where none is named."""
    builds = [arg.split("=", 1) for arg in args]
    if any(len(b) != 2 for b in builds):
        sys.exit(f"{prog}: name builds as NAME=PATH/libvramshare.so[@MOVES]")
    if not builds:
        builds = [("this", str(this))]
    moves = os.environ.get("MOVES", "overlap")
    builds = [(name, *(path.rsplit("@", 1) if "@" in path else (path, moves)))
              for name, path in builds]
    for name, path, _ in builds:
        if not Path(path).is_file():
            sys.exit(f"{prog}: no shim library at {path} (build {name}); "
                     "name builds as NAME=PATH/libvramshare.so")
    return builds


def at(samples, t_ns, keys):
    """The counters `keys` at `t_ns`, between the samples on either side of
    it (taken every 50 ms or more); None outside them."""
    before = [s for s in samples if s["t_ns"] <= t_ns]
    after = [s for s in samples if s["t_ns"] >= t_ns]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    share = (t_ns - a["t_ns"]) / (b["t_ns"] - a["t_ns"]) if b["t_ns"] > a["t_ns"] else 0
    return tuple(a[k] + (b[k] - a[k]) * share for k in keys)


def run(args, costs, shim, quota_mib, moves, work, keep=None):
    """One run: its step times (ms, the first two left out), and MiB moved
    out and in a step over those steps, from the trace's samples. Its
    trace is copied to `keep` where given."""
    env = dict(os.environ, **MALLOC_TUNING, **costs, LD_LIBRARY_PATH=str(OUT))
    trace = work / "trace.json"
    trace.unlink(missing_ok=True)
    if shim:
        env.update(LD_PRELOAD=shim, VRAMSHARE_QUOTA=f"{quota_mib}MiB",
                   VRAMSHARE_MOVES=moves, VRAMSHARE_DIR=str(work / "shm"),
                   VRAMSHARE_TRACE=str(trace))
    result = subprocess.run([str(OUT / "client"), *args], env=env,
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"client failed ({result.returncode}) under {shim or 'no shim'} at {quota_mib} MiB:\n{result.stderr[-2000:]}")
    # A step CUDA refused (an allocation past the fake device's capacity)
    # would leave the loop doing less than it says.
    refused = [line for line in result.stdout.splitlines()
               if " rc=" in line and " rc=0" not in line]
    if refused:
        sys.exit(f"{len(refused)} client steps failed under {shim or 'no shim'} at {quota_mib} MiB, "
                 f"the first: {refused[0]}")
    marks = [int(line.split("at_us=")[1]) for line in result.stdout.splitlines()
             if line.startswith("step found=")]
    times = [(b - a) / 1000 for a, b in zip(marks, marks[1:])][2:]
    moved = (None, None)
    if shim and trace.exists():
        samples = json.loads(trace.read_text())["processes"][0].get("moves", {}).get("samples", [])
        start, end = marks[2] * 1000, marks[-1] * 1000
        counts = [at(samples, t, ("bytes_to_host", "bytes_to_device")) for t in (start, end)]
        if None not in counts:
            moved = tuple((b - a) / MIB / len(times) for a, b in zip(*counts))
    if keep and trace.exists():
        shutil.copyfile(trace, keep)
    return times, moved


def compare(loops, builds, costs, link_mib_per_s, rounds, shares):
    """Runs each loop (name: (args, peak MiB)) natively and under each
    build at each share of its peak, `rounds` times in rotating order, and
    prints a table per loop: ms a step (median over rounds of each run's
    median step), x native (median of each round's ratio), x floor (the
    native step or the bytes over the quota crossing the link once each
    way at `link_mib_per_s`, whichever is longer), MiB moved each way, and
    each round's x native, for the spread."""
    for loop, (args, peak) in loops.items():
        configs = [("native", None, None, None)] + [
            (f"{name} {share:.0%}", path, round(peak * share), build_moves)
            for share in shares for name, path, build_moves in builds]
        step_ms = {c[0]: [] for c in configs}
        ratio = {c[0]: [] for c in configs}
        moved = {c[0]: [] for c in configs}
        # TRACES=DIR keeps each run's trace, to read its counters beside a
        # GPU run's.
        traces = os.environ.get("TRACES")
        if traces:
            os.makedirs(traces, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for label, shim, quota, build_moves in order:
                    name = f"{loop}-{label.replace(' ', '-').rstrip('%')}-r{r}.json"
                    keep = Path(traces) / name if traces and shim else None
                    times, mib = run(args, costs, shim, quota, build_moves, Path(tmp), keep)
                    step_ms[label].append(statistics.median(times))
                    moved[label].append(mib)
                for label, *_ in order:
                    ratio[label].append(step_ms[label][-1] / step_ms["native"][-1])
        native_ms = statistics.median(step_ms["native"])
        print(f"\n{loop} (peak {peak} MiB)")
        print(f"{'run':<22}{'ms/step':>9}{'x native':>10}{'x floor':>9}"
              f"{'MiB out':>9}{'MiB in':>8}  x native by round")
        for label, _, quota, _ in configs:
            over = max(0, peak - quota) if quota else 0
            floor = max(native_ms, over * 1000 / link_mib_per_s)
            ms = statistics.median(step_ms[label])
            outs = [m[0] for m in moved[label] if m[0] is not None]
            ins = [m[1] for m in moved[label] if m[1] is not None]
            out_text = f"{statistics.median(outs):9.0f}" if outs else f"{'-':>9}"
            in_text = f"{statistics.median(ins):8.0f}" if ins else f"{'-':>8}"
            rounds_text = " ".join(f"{r:.2f}" for r in ratio[label])
            print(f"{label:<22}{ms:9.1f}{statistics.median(ratio[label]):10.2f}"
                  f"{ms / floor:9.2f}{out_text}{in_text}  {rounds_text}", flush=True)


def settings(prog):
    """ROUNDS, STEPS and SHARES from the environment, checked."""
    rounds = int(os.environ.get("ROUNDS", "3"))
    steps = int(os.environ.get("STEPS", "8"))
    if steps < 5:
        sys.exit(f"{prog}: STEPS must be 5 or more (two warm-up steps, three timed)")
    shares = [float(s) for s in os.environ.get("SHARES", "0.75 0.5").split()]
    return rounds, steps, shares
