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
