"""Case 5: a real worker process's resident size once its host view has loaded.

The worker (``python -m scheduler.cmd.worker``, one worker process forked by
its supervisor's master) starts against the Redis cloud; one
``select_destinations`` call over RabbitMQ makes it load its view (that first
call's time is reported too), a second is a warm call. Resident size (VmRSS)
and its peak (VmHWM) come from ``/proc/<pid>/status`` of the worker process,
the one that serves and holds the view (the master only supervises).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

from bench.cases.engine import SINGLE, request
from bench.runner import Bench
from bench.targets import Target
from scheduler import rpc

#: What this case is held to (bench.report reads each value measured against them).
TARGETS: tuple[Target, ...] = (
    Target("rss_100k", "worker resident size <= 300 MB at 100k hosts", 300.0, "max"),
)


def proc_status_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid``, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def run(bench: Bench) -> dict[str, Any]:
    rows = []
    for hosts in bench.sizes.memory_hosts:
        bench.log(f"memory: worker at {hosts} hosts")
        rc = bench.redis_cloud(hosts)
        worker = rc.cluster.start_worker(name=f"worker-memory-{hosts}")
        pid = worker.serving_pid()
        idle = proc_status_mb(pid)
        transport = bench.transport(rc.cluster)
        try:
            client = rpc.SchedulerClient(transport, timeout=300)
            ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
            timings = []
            uuids = []
            for _ in range(2):
                uuids.append(str(uuidlib.uuid4()))
                started = time.perf_counter()
                client.select_destinations(ctxt, request(SINGLE), [uuids[-1]])
                timings.append(time.perf_counter() - started)
            loaded = proc_status_mb(pid)
        finally:
            transport.cleanup()
            worker.stop()
            rc.cluster.processes.remove(worker)
        for uuid in uuids:
            rc.store.release(uuid)
        rows.append(
            {
                "hosts": hosts,
                "rss_mb": loaded["VmRSS"],
                "peak_rss_mb": loaded["VmHWM"],
                "rss_before_load_mb": idle["VmRSS"],
                "first_call_ms": timings[0] * 1000,
                "warm_call_ms": timings[1] * 1000,
            }
        )
        bench.log(
            f"  RSS {loaded['VmRSS']:.0f} MB (peak {loaded['VmHWM']:.0f} MB), "
            f"first call {timings[0] * 1000:.0f} ms"
        )
    return {"rows": rows}
