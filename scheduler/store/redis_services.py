"""The Redis store's service records, heartbeats and the computes' instance
reports (:class:`scheduler.store.base.ServiceStore`)."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from scheduler.exceptions import CorruptRecord
from scheduler.store.base import (
    InstanceReport,
    Refusal,
    Service,
    ServiceReport,
    check_reports,
)
from scheduler.store.records import PREEMPTIONS_KEPT, REFUSALS_KEPT, PreemptionEntry
from scheduler.store.redis_base import RedisBase
from scheduler.store.redis_codec import each, parse, read_service, report_text
from scheduler.store.redis_connect import translated

#: Fields asked per HMGET when some hosts' heartbeats are read.
_HMGET_CHUNK = 5000


#: Hosts marked down per script (a few writes each: a short script).
_MARK_DOWN_CHUNK = 500


class RedisServices(RedisBase):
    """Services (with their heartbeats), and what each compute reports it runs."""

    @translated
    def register_services(self, services: Iterable[Service]) -> None:
        pairs = [value for s in services for value in (s.host, s.rpc_server)]
        if pairs:
            self._write(
                self._scripts.register_services,
                keys=self._service_keys,
                args=(self._maxlen, *pairs),
            )

    @translated
    def report_services(self, reports: Iterable[ServiceReport]) -> None:
        args = [
            value
            for r in check_reports(reports)
            for value in (r.host, report_text(r.capabilities), report_text(r.stats))
        ]
        if args:
            self._write(
                self._scripts.report_services, keys=self._service_keys, args=(self._maxlen, *args)
            )

    @translated
    def heartbeat(self, hosts: Iterable[str], now: float) -> None:
        seen: dict[Any, Any] = dict.fromkeys(hosts, repr(now))  # hset's mapping type
        if seen:
            self._client.hset(self.keys.heartbeats, mapping=seen)

    @translated
    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        seen: dict[str, str]
        if hosts is None:
            seen = self._whole(self.keys.heartbeats)
        else:
            pipe = self._pipeline(transaction=False)
            for start in range(0, len(hosts), _HMGET_CHUNK):
                pipe.hmget(self.keys.heartbeats, hosts[start : start + _HMGET_CHUNK])
            values = itertools.chain.from_iterable(pipe.execute()) if hosts else ()
            seen = {
                host: value for host, value in zip(hosts, values, strict=True) if value is not None
            }
        try:
            return dict(zip(seen, map(float, seen.values()), strict=True))
        except ValueError as exc:
            raise CorruptRecord(key=self.keys.heartbeats, reason=repr(exc)) from exc

    @translated
    def list_services(self) -> list[Service]:
        # In pages, heartbeats first (they only move forward, but for a host
        # marked down meanwhile): no one command, nor a MULTI, holds both
        # hashes whole.
        seen = self._whole(self.keys.heartbeats)
        return self._services(self._scan(self.keys.services), seen)

    @translated
    def get_service(self, host: str) -> Service | None:
        pipe = self._pipeline(transaction=True)
        pipe.hget(self.keys.services, host)
        pipe.hget(self.keys.heartbeats, host)
        raw, last_seen = pipe.execute()
        if raw is None:
            return None
        return self._service(raw, {host: last_seen})

    def _service(self, raw: str, seen: Mapping[str, str | None]) -> Service:
        return parse(lambda d: read_service(d, seen.get(d["host"])), raw, self.keys.services)

    def _services(
        self, pairs: Iterable[tuple[str, str]], seen: Mapping[str, str | None]
    ) -> list[Service]:
        return sorted(
            each(lambda d: read_service(d, seen.get(d["host"])), pairs, self.keys.services),
            key=lambda s: s.host,
        )

    @translated
    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None) -> None:
        self._write(
            self._scripts.set_service_disabled,
            keys=(*self._service_keys, self.keys.provider_names, self.keys.providers),
            args=(self._maxlen, host, "1" if disabled else "0", json.dumps(reason)),
        )

    @translated
    def record_build_result(self, host: str, success: bool) -> None:
        self._write(
            self._scripts.record_build_result,
            keys=self._service_keys,
            args=(self._maxlen, host, "1" if success else "0"),
        )

    @translated
    def record_refusal(self, refusal: Refusal) -> None:
        pipe = self._pipeline(transaction=True)
        pipe.lpush(self.keys.refusals, json.dumps(refusal.to_primitive()))
        pipe.ltrim(self.keys.refusals, 0, REFUSALS_KEPT - 1)
        pipe.execute()

    @translated
    def recent_preemptions(self, limit: int = 20) -> list[PreemptionEntry]:
        if limit < 1:
            return []
        raw = self._client.lrange(self.keys.preemptions, 0, min(limit, PREEMPTIONS_KEPT) - 1)
        return [parse(PreemptionEntry.from_primitive, text, self.keys.preemptions) for text in raw]

    @translated
    def recent_refusals(self, limit: int = 20) -> list[Refusal]:
        if limit < 1:
            return []
        raw = self._client.lrange(self.keys.refusals, 0, limit - 1)
        return [parse(Refusal.from_primitive, text, self.keys.refusals) for text in raw]

    @translated
    def report_instances(self, reports: Iterable[InstanceReport]) -> None:
        mapping: dict[Any, Any] = {r.host: json.dumps(r.to_primitive()) for r in reports}
        if mapping:
            self._client.hset(self.keys.reports, mapping=mapping)

    def instance_reports(self, batch: int = 500) -> Iterator[InstanceReport]:
        for host, raw in self._scan(self.keys.reports, batch):
            yield from each(
                functools.partial(InstanceReport.from_primitive, host),
                [(host, raw)],
                self.keys.reports,
            )

    @translated
    def mark_down(self, hosts: Iterable[str]) -> None:
        names = list(dict.fromkeys(hosts))
        for start in range(0, len(names), _MARK_DOWN_CHUNK):
            chunk = names[start : start + _MARK_DOWN_CHUNK]
            self._write(
                self._scripts.mark_down, keys=self._service_keys, args=(self._maxlen, *chunk)
            )
