"""CPU time per process and for the whole machine, from /proc (Linux).

A throughput figure on a shared 2-core machine means little without knowing
who used the cores: :class:`CpuMeter` reads the CPU seconds of named groups of
processes (ours, and the broker's and Redis's, found by name) and how many
cores the machine as a whole kept busy between :meth:`start` and :meth:`stop`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Process names (``/proc/<pid>/comm``) of the services every case shares.
SERVICES = {"broker": ("beam.smp",), "redis": ("redis-server",)}


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of ``pids`` (ones that have gone count as 0)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


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


def service_pids() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {name: [] for name in SERVICES}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        for name, comms in SERVICES.items():
            if comm in comms:
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
        self._cpu = {name: cpu_seconds(pids) for name, pids in self.groups.items()}
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per group, plus ``machine_busy_cores`` (0..cores) and ``seconds``."""
        wall = time.monotonic() - self._wall
        busy, total = _machine_ticks()
        out = {name: cpu_seconds(pids) - self._cpu[name] for name, pids in self.groups.items()}
        cores = os.cpu_count() or 1
        ticks = total - self._machine[1]
        out["machine_busy_cores"] = cores * (busy - self._machine[0]) / ticks if ticks else 0.0
        out["seconds"] = wall
        return out
