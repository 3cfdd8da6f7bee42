"""A worker's cold load alone, against a private Redis holding only what it reads.

``python -m bench.coldload --hosts 300000 --rdb /tmp/coldload-300k.rdb``
starts a private ``redis-server`` (no persistence, its own port), writes the
hosts of :func:`bench.cloud.plan` with :func:`bench.cloud.populate` (the
store's own scripts, pipelined: providers, their inventories, traits,
aggregates and usage, services, heartbeats, the aggregates themselves:
everything :meth:`Store.compact_snapshot` reads, and none of the instance
records or reports that make the ``cell`` case's populate take ~20 minutes),
then times :meth:`HostView.load` (the worker's cold load: the snapshot, and
the view's columns built from it) and the snapshot alone, ``--rounds`` times
each, in this process. ``--rdb PATH`` saves the populated store there and
starts from it on a later run with the same ``--hosts``. ``--profile PATH``
writes a cProfile of one more load there (``python -m pstats PATH``).

``--worker`` times a real worker instead (``python -m
scheduler.cmd.worker``, RabbitMQ as the functional tests use it): its first
``select_destinations``, which loads its view, catches up and decides, as the
``cell`` case's cold load does, with every host's heartbeat made fresh first.

``--tree DIR`` (repeatable) times the load with the code of each of those
source trees instead (each a checkout of this project: say, the commit
before a change and after it), in alternating rounds against the same
populated store, each round in a fresh process; the report gives each
tree's median and its ratio to the first tree's. A tree whose code cannot
read what the store holds fails its rounds with the error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

from bench import cloud
from bench.cases.cell import private_redis

PREFIX = "bench-coldload"
#: Processes writing the hosts while populating.
POPULATE_PROCESSES = 2

#: Run in a fresh process with a tree's code: time its cold load and snapshot.
_MEASURE = """
import gc, json, sys, time
from scheduler.engine.hostview import HostView
from scheduler.engine import EngineSettings
from scheduler.store import RedisStore

url, prefix, profile = sys.argv[1], sys.argv[2], sys.argv[3]
store = RedisStore(url, prefix, socket_timeout=60.0)
view = HostView(store, EngineSettings())
gc.collect()
started, cpu = time.perf_counter(), time.process_time()
view.load(time.time())
load, load_cpu = time.perf_counter() - started, time.process_time() - cpu
hosts = view.size
del view
gc.collect()
started = time.perf_counter()
snap = store.compact_snapshot()
snapshot = time.perf_counter() - started
del snap
with open("/proc/self/status") as status:
    rss = {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in status)
           if k in ("VmRSS", "VmHWM")}
if profile:
    import cProfile
    gc.collect()
    view = HostView(store, EngineSettings())
    cProfile.run("view.load(time.time())", profile)
print(json.dumps({"load_s": load, "load_cpu_s": load_cpu, "snapshot_s": snapshot, "hosts": hosts,
                  "peak_rss_mb": rss["VmHWM"]}))
"""


def _populate(url: str, hosts: int) -> float:
    from scheduler.store import RedisStore

    store = RedisStore(url, PREFIX, socket_timeout=60.0)
    try:
        return cloud.populate(
            store,
            cloud.plan(hosts),
            url=url,
            prefix=PREFIX,
            processes=POPULATE_PROCESSES,
            pipelined=True,
        )
    finally:
        store.close()


def _measure(tree: Path, url: str, profile: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, url, PREFIX, profile],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr.strip().splitlines()[-1:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _worker(tree: Path, url: str, names: list[str]) -> dict[str, float]:
    """A real worker's cold load, as the ``cell`` case times it: its first
    ``select_destinations`` over RabbitMQ (the load, the catch-up and one
    decision with its claim, released after), and its VmRSS then."""
    from bench.cases.engine import SINGLE, request
    from bench.cases.memory import proc_status_mb
    from bench.cluster import Cluster
    from scheduler import rpc
    from scheduler.store import RedisStore

    store = RedisStore(url, PREFIX, socket_timeout=60.0)
    store.heartbeat(names, time.time())  # every host up, as in a live cell
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="coldload-")))
    cluster.write_config(redis={"url": url, "key_prefix": PREFIX})
    before, here = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = str(tree)  # the worker runs the tree's code
    os.chdir(tree)  # (``python -m`` puts its directory first on the path)
    try:
        worker = cluster.start_worker(name="worker-coldload")
    finally:
        os.chdir(here)
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    transport = cluster.open_transport()
    consumer = str(uuidlib.uuid4())
    try:
        scheduler = rpc.SchedulerClient(transport, timeout=900)
        ctxt = rpc.RequestContext(user_id="bench", project_id="bench")
        started = time.perf_counter()
        scheduler.select_destinations(ctxt, request(SINGLE), [consumer])
        seconds = time.perf_counter() - started
        rss = proc_status_mb(worker.serving_pid())
    finally:
        transport.cleanup()
        cluster.close()  # its own prefix on the shared Redis, not this one
        store.release(consumer)
        store.close()
    return {"load_s": seconds, "worker_rss_mb": rss["VmRSS"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.coldload",
        description="Time a worker's cold load (HostView.load) against a private Redis "
        "holding only the providers, services, heartbeats and aggregates it reads.",
    )
    parser.add_argument("--hosts", type=int, default=100000, help="hosts in the cloud")
    parser.add_argument(
        "--rdb", type=Path, help="save the populated store here; start from it when it exists"
    )
    parser.add_argument("--rounds", type=int, default=3, help="loads timed per tree")
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="time the code of this source tree (repeatable; default: this one)",
    )
    parser.add_argument("--profile", default="", help="write a cProfile of one more load here")
    parser.add_argument(
        "--worker",
        action="store_true",
        help="time a real worker's first select_destinations over RabbitMQ instead "
        "(needs RabbitMQ as the functional tests do), and its VmRSS after it",
    )
    args = parser.parse_args(argv)
    trees = args.tree or [Path(__file__).resolve().parent.parent]

    server, client, loaded = private_redis(args.rdb)
    url = server.url()
    try:
        if loaded:
            print(f"loaded {args.rdb}", flush=True)
        else:
            seconds = _populate(url, args.hosts)
            print(f"populated {args.hosts} hosts in {seconds:.0f} s", flush=True)
            if args.rdb is not None:
                client.save()
                shutil.copy(server.dir / "dump.rdb", args.rdb)
        memory = client.info("memory")["used_memory"] / 2**20
        print(f"Redis used_memory {memory:.0f} MB", flush=True)
        rows: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
        names = list(client.hkeys(f"{{{PREFIX}}}:services")) if args.worker else []
        for _ in range(args.rounds):
            for tree in trees:
                if args.worker:
                    rows[tree].append(_worker(tree, url, [n.decode() for n in names]))
                else:
                    rows[tree].append(_measure(tree, url, ""))
                print(f"  {tree}: {rows[tree][-1]}", flush=True)
        first = statistics.median(r["load_s"] for r in rows[trees[0]])
        if args.worker:
            for tree in trees:
                load = statistics.median(r["load_s"] for r in rows[tree])
                rss = max(r["worker_rss_mb"] for r in rows[tree])
                print(
                    f"{tree}: worker cold load median {load:.2f} s, {load / first:.2f}x "
                    f"the first tree; worker RSS up to {rss:.0f} MB",
                    flush=True,
                )
            return 0
        for tree in trees:
            load = statistics.median(r["load_s"] for r in rows[tree])
            cpu = statistics.median(r["load_cpu_s"] for r in rows[tree])
            first_cpu = statistics.median(r["load_cpu_s"] for r in rows[trees[0]])
            snapshot = statistics.median(r["snapshot_s"] for r in rows[tree])
            peak = max(r["peak_rss_mb"] for r in rows[tree])
            print(
                f"{tree}: load median {load:.2f} s (snapshot {snapshot:.2f} s), "
                f"{load / first:.2f}x the first tree; its CPU time {cpu:.2f} s, "
                f"{cpu / first_cpu:.2f}x; peak RSS {peak:.0f} MB",
                flush=True,
            )
        if args.profile:
            _measure(trees[-1], url, args.profile)
            print(f"profile of {trees[-1]} in {args.profile}", flush=True)
    finally:
        client.close()
        server.destroy()
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s in all)")
    sys.exit(code)
