"""The README's walkthrough, run as pasted against the real RabbitMQ and
Redis, so that it cannot rot.

It runs in a copy of the repository (it makes its own ``.venv`` there, as a
new user does), in bash with ``-e`` and ``pipefail`` (a step that fails
fails the test). Only what must differ between two runs on one machine is
changed: the vhost and key prefix (``walkthrough``) and the metrics ports.
Before its last part (stop the daemons, remove what it made) it waits while
the shared checker looks at what it left in the store; then it must leave
nothing behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import time
import uuid as uuidlib
from pathlib import Path

import pytest
import redis

from bench.cluster import Cluster
from bench.nodes import free_port
from scheduler.store import open_store
from tests.functional.conftest import REDIS_URL

ROOT = Path(__file__).resolve().parents[2]
#: Where the walkthrough stops while the checker runs.
STOP_LINE = "# Stop the daemons, then remove the vhost, the keys and the files."

pytestmark = pytest.mark.timeout(900)


def readme_walkthrough() -> str:
    """The walkthrough block, read as the docs page reads it."""
    path = ROOT / "doc" / "source" / "_exts" / "readme_block.py"
    spec = importlib.util.spec_from_file_location("readme_block", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.extract((ROOT / "README.md").read_text())
    return text


def repository_copy(into: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) under ``into``."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def vhosts() -> set[str]:
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts"], check=True, capture_output=True, text=True
    ).stdout
    return set(out.split())


def test_the_readme_walkthrough_runs_as_pasted(tmp_path: Path) -> None:
    script = readme_walkthrough()
    assert STOP_LINE in script, "the walkthrough's last part moved: update STOP_LINE"
    name = f"walk-{uuidlib.uuid4().hex[:8]}"
    worker_port, conductor_port = free_port(), free_port()
    checkpoint, resume = tmp_path / "checkpoint", tmp_path / "resume"
    script = (
        script.replace("walkthrough", name)
        .replace("9100", str(worker_port))
        .replace("9200", str(conductor_port))
        .replace(
            STOP_LINE,
            f"touch {checkpoint}; until [ -e {resume} ]; do sleep 0.2; done\n{STOP_LINE}",
        )
    )
    repo = repository_copy(tmp_path / "repo")
    log = (tmp_path / "walkthrough.out").open("w")
    run = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=repo,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 720
        while not checkpoint.exists():
            assert run.poll() is None, (tmp_path / "walkthrough.out").read_text()[-4000:]
            assert time.monotonic() < deadline, "the walkthrough did not reach its end"
            time.sleep(1)
        said = (tmp_path / "walkthrough.out").read_text()
        assert "scheduler_decisions_total" in said  # the metrics port was on
        # What it left in the store holds every invariant (the shared checker).
        (tmp_path / "check").mkdir()
        left = Cluster(tmp_path / "check", ident=name, shared_vhost=name)
        left.store.close()
        left.prefix, left.store = name, open_store(REDIS_URL, name)
        try:
            assert left.store.list_instances(), "the walkthrough's instances are in the store"
            left.check_accounting()
        finally:
            left.store.close()
        resume.touch()
        assert run.wait(120) == 0, (tmp_path / "walkthrough.out").read_text()[-4000:]
    finally:
        if run.poll() is None:  # the shell and the daemons it started
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(60)
        log.close()
    # Nothing left behind: the vhost, the keys and the files are gone.
    assert name not in vhosts()
    assert not list(redis.Redis.from_url(REDIS_URL).scan_iter(f"{{{name}}}:*"))
    assert not list(repo.glob(f"{name}.conf")) and not list(repo.glob("*.log"))
