"""The machine a run measured: CPU, cores, memory, load, and the versions that matter."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

PACKAGES = ("numpy", "oslo.messaging", "kombu", "redis", "hiredis", "structlog")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _redis_version(url: str) -> str | None:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2)
        return str(client.info("server").get("redis_version"))
    except redis.RedisError:
        return None


def _rabbit_version() -> str | None:
    try:
        out = subprocess.run(
            ["rabbitmqctl", "-q", "version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def describe(redis_url: str | None = None, services: bool = True) -> dict[str, Any]:
    """What to print next to every number: figures mean little without it."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {p: _version(p) for p in PACKAGES},
        "load_average_at_start": load_average(),
    }
    if services:
        info["redis_server"] = _redis_version(redis_url) if redis_url else None
        info["rabbitmq_server"] = _rabbit_version()
    return info
