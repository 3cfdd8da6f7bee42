"""A daemon that has stopped ends its process at once (:func:`exit_now`): its
exit handlers run, what it wrote is flushed, its status is the exit status."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_exit_now_runs_the_exit_handlers_flushes_and_exits_with_the_status() -> None:
    script = textwrap.dedent(
        """
        import atexit, sys
        from scheduler.cmd._daemon import exit_now
        atexit.register(lambda: print("handler ran"))
        sys.stdout.write("buffered, ")
        sys.stderr.write("said")
        exit_now(3)
        print("never")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 3
    assert out.stdout == "buffered, handler ran\n"
    assert out.stderr == "said"
