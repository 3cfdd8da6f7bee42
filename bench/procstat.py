"""CPU time per process and for the whole machine, from /proc (Linux).

A throughput figure on a shared 2-core machine means little without knowing
who used the cores: :class:`CpuMeter` reads the CPU seconds of named groups of
processes (ours, and the broker's and Redis's, each asked for its pid) and how many
cores the machine as a whole kept busy between :meth:`start` and :meth:`stop`.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Process names (``/proc/<pid>/comm``) of the services every case shares,
#: where the services cannot say their own pid (:func:`service_pids`).
SERVICES = {"broker": ("beam.smp",), "redis": ("redis-server",)}
#: Where a bench process hands the services' pids to a process it starts
#: (:func:`service_env`), which then need not ask again.
SERVICE_PIDS_ENV = "BENCH_SERVICE_PIDS"


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of ``pids`` (ones that have gone count as 0)."""
    return sum(_each(pids).values())


def _each(pids: Iterable[int]) -> dict[int, float]:
    """User + system CPU seconds of each of ``pids`` still there."""
    found = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
    return found


def family(pid: int) -> list[int]:
    """``pid`` and its direct children (a supervisor's forked workers).

    Linux lists a child under the thread that forked it, and cotyledon's
    master forks its workers from a thread of its own, not the main one: the
    children of every thread are read."""
    children = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return [pid]
    for thread in threads:
        try:
            children += [int(c) for c in (thread / "children").read_text().split()]
        except OSError:
            continue  # the thread has ended
    return [pid, *sorted(set(children))]


@functools.cache
def service_pids() -> dict[str, list[int]]:
    """The broker's and Redis's processes: each asked for its own pid (the
    broker ``rabbitmqctl`` talks to, the Redis at the bench's URL), so that a
    second broker on the machine (a test's own), or ``rabbitmqctl`` itself (an
    Erlang VM too), is not counted as ours; by process name where one cannot
    be asked (the broker's: a VM started with ``-s rabbit``)."""
    given = os.environ.get(SERVICE_PIDS_ENV)
    if given:
        return {name: list(pids) for name, pids in json.loads(given).items()}
    found = {"broker": _broker_pid(), "redis": _redis_pid()}
    named = {name: pids for name, pids in _by_name().items() if found[name] is None}
    return {name: [pid] for name, pid in found.items() if pid is not None} | named


def service_env() -> dict[str, str]:
    """The environment for a process that meters the services too: this one's,
    with the services' pids."""
    return {**os.environ, SERVICE_PIDS_ENV: json.dumps(service_pids())}


def _broker_pid() -> int | None:
    from bench.amqp import broker_eval

    try:
        return int((broker_eval("os:getpid().") or "").strip().strip('"'))
    except ValueError:
        return None


def _redis_pid() -> int | None:
    import redis

    from bench.cluster import REDIS_URL

    try:
        client = redis.Redis.from_url(REDIS_URL)
        try:
            return int(client.info("server")["process_id"])
        finally:
            client.close()
    except (redis.RedisError, KeyError, ValueError):
        return None


def _by_name() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {name: [] for name in SERVICES}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for name, comms in SERVICES.items():
            if comm in comms and (name != "broker" or b"rabbit" in cmdline):
                found[name].append(int(entry.name))
    return found


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


class CpuMeter:
    """CPU seconds per group of processes, and busy cores, over an interval."""

    def __init__(self, groups: Mapping[str, Iterable[int]], include_services: bool = True) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items()}
        if include_services:
            self.groups.update(service_pids())

    def start(self) -> CpuMeter:
        self._wall = time.monotonic()
        self._machine = _machine_ticks()
        self._cpu = {name: _each(pids) for name, pids in self.groups.items()}
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per group, plus ``machine_busy_cores`` (0..cores) and
        ``seconds``. A process that was not there at both ends counts for
        nothing (one that ended took its count with it)."""
        wall = time.monotonic() - self._wall
        busy, total = _machine_ticks()
        out = {}
        for name, pids in self.groups.items():
            now, then = _each(pids), self._cpu[name]
            out[name] = sum(now[pid] - then[pid] for pid in now.keys() & then.keys())
        cores = os.cpu_count() or 1
        ticks = total - self._machine[1]
        out["machine_busy_cores"] = cores * (busy - self._machine[0]) / ticks if ticks else 0.0
        out["seconds"] = wall
        return out
