"""A run's trace beside its results.jsonl: trace-RUN.json there, or, as
scripts/gpu/tier-ab leaves them, packed together in traces.tar.gz there."""
import json
import os
import tarfile


def load(folder, run):
    """The trace of `run` in `folder`, as a dict. Raises OSError (no such
    file or member), ValueError (not JSON) or tarfile.TarError."""
    name = f"trace-{run}.json"
    path = os.path.join(folder, name)
    if os.path.exists(path):
        with open(path) as file:
            return json.load(file)
    with tarfile.open(os.path.join(folder, "traces.tar.gz")) as packed:
        try:
            member = packed.extractfile(name)
        except KeyError:
            raise FileNotFoundError(f"{name} is neither in {folder} nor in its traces.tar.gz")
        return json.load(member)


def timed_step(results, run, step):
    """Where timed step `step` (0: the first) of `run` lies, from its line
    in `results` (tier-check's results.jsonl): (the job's result, the
    step's start in CLOCK_MONOTONIC ns, its length in ms). A step's start is
    the first timed step's start plus the lengths of the timed steps before
    it: the harness waits for the device between steps, so the gaps are
    short. Raises StopIteration where `results` has no line for `run`."""
    line = next(line for line in map(json.loads, open(results)) if line["name"] == run)
    result = line["result"]
    each = result["step_ms_each"]
    begin = result["timed_ns"][0] + sum(each[:step]) * 1e6
    return result, begin, each[step]
