"""CuPy with its default memory pool, for the allocation matrix: eight
256 MiB arrays, filled and checked, held a moment at the peak. One JSON line;
--expect-oom: must end in cupy's OutOfMemoryError."""
import json
import sys
import time

import cupy as cp

expect_oom = "--expect-oom" in sys.argv
try:
    arrays = [cp.full((64 << 20,), i + 1, dtype=cp.float32) for i in range(8)]
    sums = [float(a.sum()) for a in arrays]
    time.sleep(2)
except cp.cuda.memory.OutOfMemoryError as error:
    print(json.dumps({"oom": True, "message": str(error)[:200]}))
    sys.exit(0 if expect_oom else 1)
ok = sums == [float((i + 1) * (64 << 20)) for i in range(8)] and not expect_oom
print(json.dumps({"ok": ok, "sums": sums, "mem_get_info": cp.cuda.runtime.memGetInfo()}))
sys.exit(0 if ok else 1)
