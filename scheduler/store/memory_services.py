"""The in-process store's service records, heartbeats and the computes'
instance reports (:class:`scheduler.store.base.ServiceStore`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from scheduler.exceptions import NotFound
from scheduler.resource_request import COMPUTE_STATUS_DISABLED
from scheduler.store.base import (
    InstanceReport,
    Refusal,
    Service,
    ServiceReport,
    check_reports,
    freeze_json,
)
from scheduler.store.memory_base import MemoryBase
from scheduler.store.records import PreemptionEntry


class MemoryServices(MemoryBase):
    """Services (with their heartbeats), and what each compute reports it runs."""

    def _service(self, host: str) -> Service:
        return replace(self._services[host], last_seen=self._heartbeats.get(host, 0.0))

    def register_services(self, services: Iterable[Service]) -> None:
        with self._lock:
            for service in services:
                known = self._services.get(service.host)
                if known is None:
                    known = Service(host=service.host, rpc_server=service.rpc_server)
                elif known.rpc_server != service.rpc_server:
                    known = replace(known, rpc_server=service.rpc_server)
                else:
                    continue
                self._services[service.host] = known
                self._append("service", self._service(service.host))

    def report_services(self, reports: Iterable[ServiceReport]) -> None:
        checked = check_reports(reports)
        frozen: dict[int, Any] = {}  # hosts reporting one object share its frozen copy
        with self._lock:
            for report in checked:
                self._known_service(report.host)
            for report in checked:
                changes: dict[str, Any] = {}
                if report.capabilities is not None:
                    key = id(report.capabilities)
                    if key not in frozen:
                        frozen[key] = freeze_json(report.capabilities)
                    changes["capabilities"] = frozen[key]
                if report.stats is not None:
                    changes["stats"] = MappingProxyType(dict(report.stats))
                self._change_service(self._services[report.host], **changes)

    def heartbeat(self, hosts: Iterable[str], now: float) -> None:
        with self._lock:
            self._heartbeats.update(dict.fromkeys(hosts, now))

    def heartbeats(self, hosts: Sequence[str] | None = None) -> dict[str, float]:
        with self._lock:
            if hosts is None:
                return dict(self._heartbeats)
            return {h: self._heartbeats[h] for h in hosts if h in self._heartbeats}

    def list_services(self) -> list[Service]:
        with self._lock:
            return [self._service(host) for host in sorted(self._services)]

    def get_service(self, host: str) -> Service | None:
        with self._lock:
            return self._service(host) if host in self._services else None

    def _known_service(self, host: str) -> Service:
        known = self._services.get(host)
        if known is None:
            raise NotFound(kind="service", ident=host)
        return known

    def _change_service(self, known: Service, **changes: Any) -> None:
        """Write (and feed) the service only if something changed."""
        changed = replace(known, **changes)
        if changed != known:
            self._services[known.host] = changed
            self._append("service", self._service(known.host))

    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None) -> None:
        with self._lock:
            self._change_service(
                self._known_service(host), disabled=disabled, disabled_reason=reason
            )
            # The same step keeps the root provider's status trait in line.
            uuid = self._names.get(host)
            provider = self._providers.get(uuid) if uuid else None
            if (
                provider is not None
                and provider.parent_uuid is None
                and (COMPUTE_STATUS_DISABLED in provider.traits) != disabled
            ):
                traits = provider.traits ^ {COMPUTE_STATUS_DISABLED}
                self._rewrite(provider, traits=frozenset(traits))

    def record_build_result(self, host: str, success: bool) -> None:
        with self._lock:
            known = self._known_service(host)
            self._change_service(known, failed_builds=0 if success else known.failed_builds + 1)

    def record_refusal(self, refusal: Refusal) -> None:
        with self._lock:
            self._refusals.appendleft(refusal)

    def recent_preemptions(self, limit: int = 20) -> list[PreemptionEntry]:
        with self._lock:
            return list(itertools.islice(self._preemptions, max(limit, 0)))

    def recent_refusals(self, limit: int = 20) -> list[Refusal]:
        with self._lock:
            return list(itertools.islice(self._refusals, max(limit, 0)))

    def report_instances(self, reports: Iterable[InstanceReport]) -> None:
        with self._lock:
            self._reports.update((r.host, r) for r in reports)

    def instance_reports(self, batch: int = 500) -> Iterator[InstanceReport]:
        with self._lock:
            reports = [self._reports[host] for host in sorted(self._reports)]
        yield from reports

    def mark_down(self, hosts: Iterable[str]) -> None:
        with self._lock:
            for host in dict.fromkeys(hosts):
                if host in self._services:
                    self._heartbeats.pop(host, None)
                    self._append("service", self._service(host))
