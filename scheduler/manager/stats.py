"""What the scheduler endpoint counts of its decisions: how many, how long
(waits for the engine apart), and the hosts each reason removed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from scheduler import health
from scheduler.engine.pipeline import InstanceTrace
from scheduler.exceptions import InvalidRequest, NoValidHost


class DecisionStats:
    """Counts of decisions and the time spent making them (for demo and metrics)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions = 0
        self.no_valid_host = 0
        self.seconds = 0.0  # summed per decision, waits for the engine included
        self.waited = 0.0  # of which waiting for the engine
        self.first_start: float | None = None
        self.last_end = 0.0

    @property
    def per_second(self) -> float:
        """Decisions per second of wall time, from the first one's start to the last one's end."""
        if self.first_start is None or self.last_end <= self.first_start:
            return 0.0
        return self.decisions / (self.last_end - self.first_start)

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Times one decision: its outcome counted, the wait for the engine
        (``scheduler_engine_wait_seconds``) kept apart from the deciding
        (``scheduler_decision_seconds``)."""
        health.take_engine_wait()  # this thread's earlier waits are not this decision's
        start = time.perf_counter()
        failed = False
        outcome = "error"
        try:
            yield
            outcome = "placed"
        except NoValidHost:
            failed = True
            outcome = "no_valid_host"
            raise
        except InvalidRequest:
            outcome = "invalid"
            raise
        finally:
            end = time.perf_counter()
            waited = min(health.take_engine_wait(), end - start)
            health.DECISIONS.labels(outcome).inc()
            health.DECISION_SECONDS.observe(end - start - waited)
            with self._lock:
                if self.first_start is None:
                    self.first_start = start
                self.last_end = max(self.last_end, end)
                self.decisions += 1
                self.no_valid_host += failed
                self.seconds += end - start
                self.waited += waited


def count_preemption(victim_classes: Sequence[str | None]) -> None:
    """One preempting claim taken, evicting instances of these priority
    classes (``scheduler_preemptions_total``, ``scheduler_preemption_victims_total``)."""
    health.PREEMPTIONS.inc()
    for name in victim_classes:
        health.PREEMPTION_VICTIMS.labels(name or "-").inc()


def count_rejections(traces: Sequence[InstanceTrace], no_valid_host: bool) -> None:
    """The hosts each reason removed in a request's decisions
    (``scheduler_hosts_rejected_total``) and, when it found no valid host, the
    reasons of the failed decision, the last (``scheduler_no_valid_host_reasons_total``)."""
    for trace in traces:
        for reason, hosts in trace.reasons.items():
            health.HOSTS_REJECTED.labels(reason).inc(hosts)
    if no_valid_host and traces:
        for reason in traces[-1].reasons:
            health.NO_VALID_HOST_REASONS.labels(reason).inc()
