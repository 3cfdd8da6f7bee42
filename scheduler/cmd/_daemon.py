"""What every daemon here does the same way: signals, waiting to be stopped,
and ending its process once stopped."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def wait_for_signal(on_stop: Callable[[], None], stop: threading.Event | None = None) -> int:
    """Block until SIGTERM or SIGINT (or until the process sets ``stop``
    itself; a signal sets it too), then call ``on_stop`` once; return the
    signal, 0 when the process set ``stop`` (a second signal while stopping is
    ignored: the stop finishes)."""
    stop = stop or threading.Event()
    received: list[int] = []

    def _handler(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop.wait(1.0):
        pass
    on_stop()
    return received[0] if received else 0


def exit_now(status: int) -> NoReturn:
    """End the process of a daemon that has stopped and closed what it opened,
    with ``status``: its exit handlers run (the logging's flush among them)
    and its standard streams are flushed, then the process ends at once,
    without the interpreter's teardown of every module and object it loaded
    (close to a second of CPU for a daemon's imports, on every stop)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed under us: nothing more to say
            pass
    os._exit(status)
