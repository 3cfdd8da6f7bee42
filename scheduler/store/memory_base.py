"""What every part of the in-process store shares: its tables and their
lock, the change feed's append, and the checks that more than one part makes
(a provider by uuid, the delete fence, a write's record check).

:class:`~scheduler.store.memory.MemoryStore` is this base and one part per
concern (:mod:`.memory_placement`, :mod:`.memory_services`,
:mod:`.memory_instances`), each a subclass of :class:`MemoryBase`; the
contract they keep together is :class:`scheduler.store.base.Store`. Every
public method of every part holds the one lock for its whole run.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from scheduler.exceptions import ProviderNotFound, RecordChanged
from scheduler.objects import InstanceRecord
from scheduler.store.base import (
    Aggregate,
    Change,
    Consumer,
    InstanceReport,
    Provider,
    RecordCheck,
    Refusal,
    Service,
    Store,
)
from scheduler.store.records import PREEMPTIONS_KEPT, REFUSALS_KEPT, PreemptionEntry


class MemoryBase(Store):
    """The tables, the lock and the feed every part of :class:`MemoryStore`
    uses; ``stream_maxlen`` bounds the change feed.

    ``clock`` tells when a DELETED record's retention has passed (as Redis's
    key expiry does for the Redis store): such a record is gone when next
    looked at.
    """

    def __init__(
        self, stream_maxlen: int = 100000, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        # Delete fences: uuid -> (the DELETED record, or None while DELETING;
        # when it expires).
        self._deleted: dict[str, tuple[InstanceRecord | None, float]] = {}
        self._lock = threading.RLock()
        self._providers: dict[str, Provider] = {}
        self._names: dict[str, str] = {}
        self._aggregates: dict[str, Aggregate] = {}
        self._consumers: dict[str, Consumer] = {}
        self._groups: dict[str, dict[str, int]] = {}
        self._services: dict[str, Service] = {}  # last_seen lives in _heartbeats
        self._heartbeats: dict[str, float] = {}
        self._reports: dict[str, InstanceReport] = {}
        self._refusals: deque[Refusal] = deque(maxlen=REFUSALS_KEPT)  # newest first
        self._preemptions: deque[PreemptionEntry] = deque(maxlen=PREEMPTIONS_KEPT)  # newest first
        self._instances: dict[str, InstanceRecord] = {}
        # The deadline index: (deadline, uuid) of every live record that has a
        # deadline, sorted (as Redis's sorted set orders them), and each one's key.
        self._due: list[tuple[float, str]] = []
        self._due_key: dict[str, tuple[float, str]] = {}
        self._pending: dict[str, str] = {}  # uuid -> its pending_member
        self._feed: list[Change] = []  # the last changes fed, oldest first
        self._maxlen = stream_maxlen
        self._fed = 0  # changes ever fed: the last cursor is f"{_fed}-0"

    def _append(self, kind: str, data: Any) -> None:
        self._fed += 1
        self._feed.append(Change(cursor=f"{self._fed}-0", kind=kind, data=data))
        if len(self._feed) >= 2 * self._maxlen:  # amortised: one trim per maxlen appends
            del self._feed[: len(self._feed) - self._maxlen]

    def _get(self, uuid: str) -> Provider:
        provider = self._providers.get(uuid)
        if provider is None:
            raise ProviderNotFound(uuid)
        return provider

    def _rewrite(self, provider: Provider, **changes: Any) -> int:
        provider = replace(provider, generation=provider.generation + 1, **changes)
        self._providers[provider.uuid] = provider
        self._append("provider", provider)
        return provider.generation

    def _put_instance(self, record: InstanceRecord) -> None:
        """Write a live record and keep its entry in the deadline index."""
        self._instances[record.uuid] = record
        self._index(record.uuid, record.deadline)

    def _index(self, uuid: str, deadline: float | None) -> None:
        old = self._due_key.get(uuid)
        if old is not None and (deadline is None or old[0] != deadline):
            del self._due[bisect.bisect_left(self._due, old)]
            del self._due_key[uuid]
        if deadline is not None and uuid not in self._due_key:
            key = (deadline, uuid)
            bisect.insort(self._due, key)
            self._due_key[uuid] = key

    def _fenced(self, uuid: str) -> tuple[InstanceRecord | None, float] | None:
        """The instance's delete fence, if it has one that has not expired."""
        fence = self._deleted.get(uuid)
        if fence is not None and fence[1] <= self._clock():
            del self._deleted[uuid]
            return None
        return fence

    def _tomb(self, uuid: str) -> InstanceRecord | None:
        """The DELETED record, within its retention."""
        fence = self._fenced(uuid)
        return None if fence is None else fence[0]

    def _check_record(self, check: RecordCheck | None) -> None:
        """(Under the lock.) Raise RecordChanged unless ``check`` passes."""
        if check is None:
            return
        record = self._instances.get(check.uuid) or self._tomb(check.uuid)
        why = check.unmatched(record)
        if why is not None:
            raise RecordChanged(uuid=check.uuid, why=why)
