"""Sampling profiles of a running daemon with py-spy (``--profile``), summarised.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... N``);
:func:`summarise` turns them into the functions with the most samples on
top of the stack (own time) and anywhere in it (inclusive), which is what
the report needs to say where a worker's time goes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path


def _executable() -> str | None:
    """py-spy from this environment (next to the interpreter) or from PATH."""
    here = os.path.dirname(sys.executable)
    return shutil.which("py-spy", path=os.pathsep.join([here, os.environ.get("PATH", "")]))


def available() -> bool:
    return _executable() is not None


def record(pid: int, seconds: float, raw_path: Path, rate: int = 200) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds``: only the thread holding the GIL, so the
    samples say where the process's Python CPU time goes (waits are left out)."""
    return subprocess.Popen(
        [
            _executable() or "py-spy",
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--output",
            str(raw_path),
            "--nonblocking",
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _frame_name(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "function (module.py)"
    name, _, where = frame.partition(" (")
    module = where.rsplit("/", 1)[-1].split(":", 1)[0].rstrip(")")
    return f"{name} ({module})" if module else name


def summarise(raw_path: Path, title: str, top: int = 30) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [
        title,
        f"{total} samples of the thread holding the GIL",
        "",
        "own time (top of stack):",
    ]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    lines += ["", "inclusive (anywhere in the stack):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    return "\n".join(lines) + "\n" if total else title + "\nno samples\n"
