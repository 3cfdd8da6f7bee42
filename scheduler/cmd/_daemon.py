"""What every daemon here does the same way: signals, and waiting to be stopped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


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
