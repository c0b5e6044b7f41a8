"""JAX (XLA_PYTHON_CLIENT_PREALLOCATE=false) for the allocation matrix:
eight 256 MiB arrays, filled and checked, held a moment at the peak. One
JSON line; --expect-oom: must end in XLA's RESOURCE_EXHAUSTED."""
import json
import sys
import time

import jax
import jax.numpy as jnp

expect_oom = "--expect-oom" in sys.argv
try:
    arrays = [jnp.full((64 << 20,), i + 1, dtype=jnp.float32) for i in range(8)]
    sums = [float(a.sum()) for a in arrays]
    jax.block_until_ready(arrays)
    time.sleep(2)
except Exception as error:  # XlaRuntimeError or JaxRuntimeError, by version
    text = str(error)
    oom = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
    print(json.dumps({"oom": oom, "message": text[:200]}))
    sys.exit(0 if oom and expect_oom else 1)
ok = sums == [float((i + 1) * (64 << 20)) for i in range(8)] and not expect_oom
print(json.dumps({"ok": ok, "sums": sums, "devices": str(jax.devices())}))
sys.exit(0 if ok else 1)
