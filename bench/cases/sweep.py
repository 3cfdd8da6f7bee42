"""Case 7: the conductor's sweep, as the store fills with finished instances.

The conductor reads its pending set (the records past their deadline) every
``sweep_interval`` with :meth:`RedisStore.list_instances_due`, one Lua
script. Records of finished instances stay in the instances hash, so a sweep
that reads every record costs what the cloud has ever kept, all of it with
Redis blocked. The store keeps pending records in a sorted set by deadline
instead, so a sweep reads only what is due.

One store, filled step by step to each size of ``sweep_records`` finished
records (ACTIVE, no deadline, about 900 bytes each as the conductor writes
them, through the store's own create script) beside ``sweep_due`` records
past their deadline. At each size:

* **index**: the sweep as the store runs it (``list_instances_due``), median
  of ``sweep_runs`` sweeps: the caller's time (the round trip and parsing the
  due records) and Redis's own time for the script (SLOWLOG, every command
  logged);
* **full scan**: the script the store ran before the index (kept here only,
  as the baseline: HGETALL of every record, each decoded), measured the same
  way in the same run, ``sweep_baseline_runs`` times;
* **re-index**: :meth:`RedisStore.index_deadlines`, what an upgraded store
  runs once (HSCAN pages from Python, one short script per page): its total
  time and Redis's own time for each command it ran (p99 and the longest).

Both sweeps must return the same records. The Redis is a private
``redis-server`` (the same binary, no persistence) so that SLOWLOG can be
set and nothing else runs on it.
"""

from __future__ import annotations

import hashlib
import time
import uuid as uuidlib
from typing import Any

import redis

from bench import cloud
from bench.nodes import PrivateRedis
from bench.runner import Bench
from bench.stats import summary
from scheduler.objects import ACTIVE, BUILDING, InstanceRecord
from scheduler.store import RedisStore
from scheduler.store.scripts import DUE_INSTANCES

#: The sweep the store ran before the deadline index: reads every record.
#: Kept here only, as the baseline.
FULL_SCAN = """
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local due, unreadable = {}, {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local ok, record = pcall(cjson.decode, flat[i + 1])
  if ok and type(record) == 'table' then
    local deadline = record.deadline
    if type(deadline) == 'number' and deadline <= now then
      due[#due + 1] = {deadline, flat[i], flat[i + 1]}
    end
  else
    unreadable[#unreadable + 1] = flat[i]
  end
end
table.sort(due, function(a, b) return a[1] < b[1] end)
local out = {}
for i = 1, math.min(#due, limit) do
  out[#out + 1] = due[i][2]
  out[#out + 1] = due[i][3]
end
return {out, unreadable}
"""

#: Records written per pipeline while filling.
FILL_CHUNK = 5000
#: What the conductor asks for per sweep (conductor_stub.redrive.SWEEP_BATCH).
LIMIT = 1000


def _finished(count: int) -> list[InstanceRecord]:
    return [
        cloud.instance_record(
            str(uuidlib.uuid4()), state=ACTIVE, task_state=None, host="h1", node="h1"
        )
        for _ in range(count)
    ]


def _redis_usec(client: redis.Redis, sha: str) -> list[int]:
    """Redis's own time (µs) of each EVALSHA of ``sha`` since the last reset."""
    entries = client.slowlog_get(10000)
    return [
        int(e["duration"])
        for e in entries
        if len(e["command"].split()) > 1 and e["command"].split()[1] == sha.encode()
    ]


def _measure(
    client: redis.Redis, call: Any, sha: str, runs: int
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """``runs`` calls: the caller's times, Redis's own times, the last result."""
    client.slowlog_reset()
    timings = []
    result = None
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        timings.append(time.perf_counter() - started)
    usec = _redis_usec(client, sha)
    return summary(timings), summary([u / 1e6 for u in usec]), result


def run(bench: Bench) -> dict[str, Any]:
    sizes = bench.sizes
    server = PrivateRedis("--appendonly", "no")
    server.start()
    store = RedisStore(server.url(), "bench-sweep", socket_timeout=30.0)
    client = redis.Redis.from_url(server.url(), socket_timeout=300.0)  # a full scan is slow
    rows = []
    try:
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100000)
        now = time.time()
        due = [
            cloud.instance_record(str(uuidlib.uuid4()), state=BUILDING, deadline=now - 3600 + i)
            for i in range(sizes.sweep_due)
        ]
        store.create_instances(due)
        store.list_instances_due(now, LIMIT)  # the index of the empty store: complete
        full_scan = client.register_script(FULL_SCAN)
        index_sha = hashlib.sha1(DUE_INSTANCES.encode()).hexdigest()  # as redis-py names it
        held = 0
        for target in sizes.sweep_records:
            bench.log(f"sweep: {target} finished records, {len(due)} due")
            while held < target:
                step = min(FILL_CHUNK, target - held)
                store.create_instances(_finished(step))
                held += step
            index, index_redis, found = _measure(
                client, lambda: store.list_instances_due(now, LIMIT), index_sha, sizes.sweep_runs
            )
            scan, scan_redis, flat = _measure(
                client,
                lambda: full_scan(keys=(store.keys.instances,), args=(repr(now), LIMIT)),
                full_scan.sha,
                sizes.sweep_baseline_runs,
            )
            scanned = [uuid.decode() for uuid in flat[0][::2]]
            assert [r.uuid for r in found] == scanned == [r.uuid for r in due], "same records"
            client.slowlog_reset()
            started = time.perf_counter()
            store.index_deadlines()
            reindex_s = time.perf_counter() - started
            commands = [int(e["duration"]) / 1e6 for e in client.slowlog_get(100000)]
            reindex_commands = summary(commands)
            row = {
                "records": target,
                "due": len(due),
                "median_ms": index["median_ms"],
                "p99_ms": index["p99_ms"],
                "index": index,
                "index_redis": index_redis,
                "full_scan": scan,
                "full_scan_redis": scan_redis,
                "reindex_s": reindex_s,
                "reindex_commands": reindex_commands,
                "redis_used_memory_mb": client.info("memory")["used_memory"] / 2**20,
            }
            rows.append(row)
            bench.log(
                f"  index: {index['median_ms']:.2f} ms (Redis {index_redis['median_ms']:.3f} ms);"
                f" full scan: {scan['median_ms']:.1f} ms (Redis {scan_redis['median_ms']:.1f} ms);"
                f" re-index {reindex_s:.1f} s, {reindex_commands['n']} commands,"
                f" p99 {reindex_commands['p99_ms']:.2f} ms,"
                f" longest {reindex_commands['max_ms']:.2f} ms"
            )
    finally:
        client.close()
        store.close()
        server.destroy()
    return {"rows": rows, "limit": LIMIT}
