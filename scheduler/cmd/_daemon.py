"""What every daemon here does the same way: signals, and waiting to be stopped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def wait_for_signal(on_stop: Callable[[], None]) -> int:
    """Block until SIGTERM or SIGINT, then call ``on_stop`` once; return the
    signal (a second one while stopping is ignored: the stop finishes)."""
    stop = threading.Event()
    received: list[int] = []

    def _handler(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop.wait(1.0):
        pass
    on_stop()
    return received[0]
