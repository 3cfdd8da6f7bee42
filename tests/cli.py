"""Run commands as an operator does: real processes, side by side."""

from __future__ import annotations

import subprocess
import sys


def run_commands(
    argvs: list[list[str]], timeout: float = 180
) -> list[subprocess.CompletedProcess[str]]:
    """``python -m <argv>`` for each argv, all at once (each start-up imports
    numpy and oslo); a command still running after ``timeout`` fails the test."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    done = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done
