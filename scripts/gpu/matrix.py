"""The allocation-path matrix, on a GPU machine: each framework or
program held to a quota under the shim, with spill host and off.

    python3 scripts/gpu/matrix.py BIN_DIR WORK_DIR OUT_DIR

BIN_DIR holds libvramshare.so and vramshare; WORK_DIR the two builds of
matrix_jobs/cuda_job.cu (cuda_job_static, cuda_job_shared). For every cell
it samples, every 0.1 s while the job runs, the job's device bytes in the
registry (`vramshare ps --json`) and nvidia-smi's number for its pid, and
reads the trace at exit. Writes OUT_DIR/matrix.jsonl and prints a table.
MATRIX_ONLY="pytorch-async cupy" runs only the programs named.
"""
import json
import os
import subprocess
import sys
import time

bin_dir, work, out = (os.path.realpath(p) for p in sys.argv[1:4])
here = os.path.dirname(os.path.realpath(__file__))
jobs = os.path.join(here, "matrix_jobs")
QUOTA = 1 << 30
shm = os.path.join(work, "shm")

torch_job = ["python3", os.path.join(here, "job.py"), "--steps", "3"]
programs = {
    "pytorch-default": (torch_job, {}),
    "pytorch-expandable": (torch_job, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "pytorch-async": (torch_job, {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    "cupy": (["python3", os.path.join(jobs, "cupy_job.py")], {}),
    "jax": (["python3", os.path.join(jobs, "jax_job.py")], {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    "jax-platform": (["python3", os.path.join(jobs, "jax_job.py")],
                     {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
    "nvcc-static": ([os.path.join(work, "cuda_job_static")], {}),
    "nvcc-shared": ([os.path.join(work, "cuda_job_shared")], {}),
}


def smi_used_mib():
    text = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True).stdout
    used = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[int(parts[0])] = int(parts[1])
    return used


def registry_device_bytes(pid):
    try:
        text = subprocess.run([os.path.join(bin_dir, "vramshare"), "ps", "--json", "--dir", shm],
                              capture_output=True, text=True, timeout=5).stdout
        for p in json.loads(text):
            if p.get("pid") == pid:
                return sum(int(d.get("device_bytes", 0)) for d in p.get("devices", {}).values())
    except Exception:
        return None
    return None


def run_cell(name, command, extra, spill, native_result=None):
    trace = os.path.join(work, f"trace-{name}-{spill}.json")
    env = dict(os.environ, **extra, LD_PRELOAD=os.path.join(bin_dir, "libvramshare.so"),
               VRAMSHARE_QUOTA=str(QUOTA), VRAMSHARE_SPILL=spill, VRAMSHARE_TRACE=trace,
               VRAMSHARE_DIR=shm, PYTHONUNBUFFERED="1")
    args = command + (["--expect-oom"] if spill == "off" else [])
    started = time.time()
    job = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    smi_max, registry_max, registry_seen = 0, 0, False
    while job.poll() is None and time.time() - started < 120:
        smi_max = max(smi_max, smi_used_mib().get(job.pid, 0))
        device = registry_device_bytes(job.pid)
        if device is not None:
            registry_seen = True
            registry_max = max(registry_max, device)
        time.sleep(0.1)
    try:
        stdout, stderr = job.communicate(timeout=max(1, 120 - (time.time() - started)))
    except subprocess.TimeoutExpired:
        job.kill()
        stdout, stderr = job.communicate()
    result = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            break
    cell = {"program": name, "spill": spill, "exit": job.returncode, "wall_s": round(time.time() - started, 1),
            "result": result, "smi_max_mib": smi_max, "registry_max_device": registry_max if registry_seen else None,
            "stderr_tail": stderr.strip().splitlines()[-4:]}
    try:
        t = json.load(open(trace))
        procs = t["processes"]
        cell["trace"] = {
            "processes": len(procs),
            "peak_device": max((int(v) for p in procs for v in p["peak_device"].values()), default=0),
            "peak_spilled": max((int(v) for p in procs for v in p["peak_spilled"].values()), default=0),
            "apis": sorted({e["api"] + "/" + e["op"] + "/" + str(e["placement"]) for e in t["events"]}),
            "spilled_allocations": sum(1 for e in t["events"] if e["op"] == "alloc" and e["placement"] == "host"),
            "rejects": sum(1 for e in t["events"] if e["op"] == "reject"),
        }
    except Exception as error:
        cell["trace"] = {"error": str(error)}
    # The verdict: the quota held, and the job did what it must.
    tr = cell["trace"]
    held = tr.get("peak_device", QUOTA + 1) <= QUOTA and (cell["registry_max_device"] or 0) <= QUOTA
    if spill == "off":
        correct = bool(result and result.get("oom")) and job.returncode == 0
    elif name.startswith("pytorch"):
        correct = bool(result and native_result and result.get("losses") == native_result.get("losses"))
    else:
        correct = bool(result and result.get("ok"))
    cell["quota_held"] = held
    cell["correct"] = correct
    cell["spilled_in_trace"] = tr.get("spilled_allocations", 0) > 0
    return cell


def main():
    os.makedirs(out, exist_ok=True)
    native = subprocess.run(torch_job, capture_output=True, text=True)
    native_result = json.loads(native.stdout.strip().splitlines()[-1])
    cells = []
    with open(os.path.join(out, "matrix.jsonl"), "w") as log:
        log.write(json.dumps({"program": "pytorch-native", "result": native_result}) + "\n")
        only = os.environ.get("MATRIX_ONLY", "").split()
        for name, (command, extra) in programs.items():
            if only and name not in only:
                continue
            for spill in ["host", "off"]:
                cell = run_cell(name, command, extra, spill, native_result)
                cells.append(cell)
                log.write(json.dumps(cell) + "\n")
                log.flush()
    print(f"quota {QUOTA >> 20} MiB per cell; MiB columns: trace peak device, registry max device, nvidia-smi max, trace peak spilled")
    print(f"{'program':20} {'spill':5} {'exit':>4} {'correct':>7} {'held':>5} {'dev':>6} {'reg':>6} {'smi':>6} {'spilled':>8} {'#spills':>7} {'rejects':>7}")
    for c in cells:
        tr = c["trace"]
        mib = lambda v: "-" if v is None else str(int(v) >> 20)
        print(f"{c['program']:20} {c['spill']:5} {c['exit']:>4} {str(c['correct']):>7} {str(c['quota_held']):>5} "
              f"{mib(tr.get('peak_device')):>6} {mib(c['registry_max_device']):>6} {c['smi_max_mib']:>6} "
              f"{mib(tr.get('peak_spilled')):>8} {tr.get('spilled_allocations', '-'):>7} {tr.get('rejects', '-'):>7}")


main()
