"""Run commands as an operator does: real processes, side by side."""

from __future__ import annotations

import subprocess
import sys


def run_commands(
    argvs: list[list[str]], timeout: float = 180, stdout_closed: bool = False
) -> list[subprocess.CompletedProcess[str]]:
    """``python -m <argv>`` for each argv, all at once (each start-up imports
    numpy and oslo); a command still running after ``timeout`` fails the test.
    ``stdout_closed``: each one's stdout is a pipe whose reading end is closed
    at once, as ``| head`` closes it once it has read enough (its stdout is
    then ``""``)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    if stdout_closed:
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.close()
            proc.stdout = None  # (so that communicate reads stderr only)
    done = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out or "", err))
    return done
