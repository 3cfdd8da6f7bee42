"""What every daemon here does the same way: signals, and waiting to be stopped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def wait_for_signal(on_stop: Callable[[], None]) -> None:
    """Block until SIGTERM or SIGINT, then call ``on_stop`` once."""
    stop = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop.wait(1.0):
        pass
    on_stop()
