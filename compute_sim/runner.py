"""One thread that runs callables after a delay, in order of when they are due."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from scheduler.log import get_logger

LOG = get_logger(__name__)


class DelayedRunner:
    """Runs callables after a delay on one thread (a build "in progress", a
    driver's answer, a batch of stats). A callable that raises is logged
    (``simulated_build_crashed``) and the rest run on; :meth:`stop` drops
    whatever is not due yet."""

    def __init__(self, name: str = "compute-sim-builds") -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), fn))
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - one bad build must not stop the rest
                LOG.error("simulated_build_crashed", error=repr(exc))
