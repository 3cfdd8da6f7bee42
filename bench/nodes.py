"""Servers of a run's own, shared by the benchmark suite and the fault tier: a
private redis-server (:class:`PrivateRedis`), with the few helpers it needs
(free ports, waiting on a condition, a directory another user may write).
They live here, not under ``tests/``, so that the benchmarks import nothing
of the tests.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.1,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def need(program: str) -> str:
    """The path of ``program``; RuntimeError when it is not on PATH."""
    path = shutil.which(program)
    if path is None:
        raise RuntimeError(f"{program} is needed on PATH")
    return path


def private_dir(prefix: str, owner: str | None = None) -> Path:
    """A directory under /tmp the given user may write (pytest's tmp_path is
    root-only, and the broker runs as ``rabbitmq``)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    if owner:
        shutil.chown(path, owner, owner)
    return path


@dataclass(frozen=True)
class Certs:
    """A CA and a server certificate for ``localhost`` (files readable by all)."""

    ca: Path
    cert: Path
    key: Path


class PrivateRedis:
    """A redis-server of the test's own (append-only, on its own port and dir)."""

    def __init__(self, *args: str, tls: Certs | None = None) -> None:
        need("redis-server")
        self.dir = private_dir("sched-redis-")
        self.port = free_port()
        self.tls = tls
        self.args = [
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            *args,
        ]
        if tls is not None:
            self.args = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(tls.cert),
                "--tls-key-file",
                str(tls.key),
                "--tls-ca-cert-file",
                str(tls.ca),
                "--tls-auth-clients",
                "no",
                *self.args,
            ]
        else:
            self.args = ["--port", str(self.port), *self.args]
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.popen = subprocess.Popen(
            ["redis-server", *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(lambda: port_open(self.port), 30, "the private Redis")

    def stop(self) -> None:
        """A clean shutdown (SIGTERM: Redis syncs its append-only file first)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            self.popen.wait(30)
        wait_until(lambda: not port_open(self.port), 30, "the private Redis to close")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, user: str = "", password: str = "", host: str = "127.0.0.1") -> str:
        auth = f"{user}:{password}@" if password else ""
        if self.tls is not None:
            return f"rediss://{auth}{host}:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{auth}{host}:{self.port}/0"

    def destroy(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
