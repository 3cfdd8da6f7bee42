"""What the cloud holds, for operators: per host, per aggregate, per project.

``scheduler-admin hosts`` and ``scheduler-admin usage`` read from here. The
hosts come from :meth:`~scheduler.store.base.ChangeFeed.compact_snapshot`,
the store's paged reader (no Redis command reads a whole hash, so none holds
the store past its 10 ms bound, whatever the size of the cloud), as columns:
:class:`HostTable` keeps one array per field across hosts and no object per
host, filters and sorts them as arrays, and makes a host's row (a dict, what
``hosts --json`` prints) only when it is printed. The projects' usage walks
the consumers one HSCAN page at a time (:meth:`scan_consumers`) and keeps
only the sums.

The JSON shapes are stable (the README's "Operator views" documents them):
every ``usage`` maps a resource class to ``{"used": n, "capacity": n}``
(capacity = int((total - reserved) x allocation_ratio), as the claim
counts it; a project's usage has no capacity); a host's child providers
(a GPU pool, a NUMA cell) count toward it.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from scheduler import rules
from scheduler.exceptions import InvalidRequest
from scheduler.store import CompactSnapshot, Consumer, Provider

#: The standard classes first, the custom ones after, by name.
_ORDER = {"VCPU": 0, "MEMORY_MB": 1, "DISK_GB": 2}


def class_order(rc: str) -> tuple[int, str]:
    return _ORDER.get(rc, 3), rc


#: ``hosts --filter KEY=VALUE`` keys, and what each matches.
FILTERS = {
    "host": "the host name, a shell pattern (cmp-1*)",
    "state": "up or down",
    "status": "enabled or disabled",
    "aggregate": "a member of this aggregate (name or uuid)",
    "trait": "has this trait (on the host or one of its child providers)",
}

#: ``hosts --sort KEY`` keys; ``used:RC``, ``free:RC`` and ``fill:RC`` (used /
#: capacity) sort by one resource class.
SORTS = ("host", "consumers", "failed_builds", "last_seen")
SORTS_BY_CLASS = ("used", "free", "fill")


@dataclass(frozen=True)
class HostTable:
    """Every compute host (a root provider with its children folded in), one
    array per field; entry ``i`` of each is host ``i``, by name."""

    names: list[str]
    uuids: list[str]
    up: np.ndarray  # bool
    has_service: np.ndarray  # bool
    disabled: np.ndarray  # bool
    disabled_reasons: list[str | None]
    failed_builds: np.ndarray  # int64
    last_seen: np.ndarray  # float64 (meaningless where there is no service)
    consumers: np.ndarray  # int64
    used: Mapping[str, np.ndarray]  # int64 per class
    capacity: Mapping[str, np.ndarray]  # int64 per class; 0 where no inventory
    has_class: Mapping[str, np.ndarray]  # bool: the host's tree has inventory of it
    traits: np.ndarray  # int32, an index into trait_sets
    trait_sets: Sequence[frozenset[str]]
    aggregates: np.ndarray  # int32, an index into aggregate_sets
    aggregate_sets: Sequence[frozenset[str]]  # aggregate uuids
    aggregate_names: Mapping[str, str]  # uuid -> name

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def classes(self) -> list[str]:
        return sorted(self.used, key=class_order)

    @cached_property
    def trait_names(self) -> list[list[str]]:
        """Per trait-set code, its traits sorted (what a row lists)."""
        return [sorted(t) for t in self.trait_sets]

    @cached_property
    def aggregate_labels(self) -> list[list[str]]:
        """Per aggregate-set code, its aggregates' names sorted (a uuid no
        aggregate record names stands for itself)."""
        names = self.aggregate_names
        return [sorted(names.get(a, a) for a in s) for s in self.aggregate_sets]

    @classmethod
    def from_snapshot(
        cls, snapshot: CompactSnapshot, now: float, service_down_time: float
    ) -> HostTable:
        """The table of a compact snapshot, up or down as the engine judges it
        (a heartbeat within ``service_down_time`` of ``now``; no service
        record: down)."""
        h, s = snapshot.hosts, snapshot.services
        order = np.array(sorted(range(len(h)), key=h.names.__getitem__), dtype=np.int64)
        names = [h.names[i] for i in order]
        n = len(names)
        at = {uuid: row for row, uuid in enumerate(h.uuids[i] for i in order)}
        # Capacity and presence per class, from each distinct inventory once.
        inventory = h.inventory[order]
        classes = sorted({rc for inv in h.inventories for rc in inv} | set(h.usage))
        capacity: dict[str, np.ndarray] = {}
        present: dict[str, np.ndarray] = {}
        for rc in classes:
            per_code = np.array(
                [inv[rc].capacity if rc in inv else 0 for inv in h.inventories] or [0],
                dtype=np.int64,
            )
            has = np.array([rc in inv for inv in h.inventories] or [False], dtype=bool)
            capacity[rc] = per_code[inventory] if n else np.zeros(0, dtype=np.int64)
            present[rc] = has[inventory] if n else np.zeros(0, dtype=bool)
        used = {
            rc: (h.usage[rc][order] if rc in h.usage else np.zeros(n, dtype=np.int64)).copy()
            for rc in classes
        }
        # Child providers are few: fold each into its host, traits too.
        traits = h.traits[order].copy()
        trait_sets = list(h.trait_sets)
        for child in snapshot.children:
            row = at.get(child.root_uuid or "")
            if row is None:
                continue  # its root came after the snapshot's page: not yet a host
            for rc, inv in child.inventories.items():
                if rc not in used:
                    used[rc] = np.zeros(n, dtype=np.int64)
                    capacity[rc] = np.zeros(n, dtype=np.int64)
                    present[rc] = np.zeros(n, dtype=bool)
                capacity[rc][row] += inv.capacity
                present[rc][row] = True
            for rc, amount in child.usages.items():
                if rc in used:
                    used[rc][row] += amount
            if not child.traits <= trait_sets[traits[row]]:
                trait_sets.append(trait_sets[traits[row]] | child.traits)
                traits[row] = len(trait_sets) - 1
        # Services by host name.
        service_at = {host: i for i, host in enumerate(s.hosts)}
        index = np.array([service_at.get(name, -1) for name in names], dtype=np.int64)
        has_service = index >= 0
        safe = np.where(has_service, index, 0)

        def of_service(column: np.ndarray, empty: Any) -> np.ndarray:
            if not len(s):
                return np.full(n, empty)
            return np.where(has_service, column[safe], empty)

        last_seen = of_service(s.last_seen, 0.0).astype(np.float64)
        return cls(
            names=names,
            uuids=[h.uuids[i] for i in order],
            up=has_service & rules.is_up(now, last_seen, service_down_time),
            has_service=has_service,
            disabled=of_service(s.disabled, False).astype(bool),
            disabled_reasons=[s.disabled_reasons[i] if i >= 0 else None for i in index],
            failed_builds=of_service(s.failed_builds, 0).astype(np.int64),
            last_seen=last_seen,
            consumers=h.consumers[order],
            used=used,
            capacity=capacity,
            has_class=present,
            traits=traits,
            trait_sets=trait_sets,
            aggregates=h.aggregates[order],
            aggregate_sets=h.aggregate_sets,
            aggregate_names={a.uuid: a.name for a in snapshot.aggregates},
        )

    # --- selecting and ordering -------------------------------------------------------

    def select(self, filters: Iterable[tuple[str, str]]) -> np.ndarray:
        """The rows (indices) every ``(key, value)`` of :data:`FILTERS` keeps.

        :raises InvalidRequest: an unknown key or value.
        """
        keep = np.ones(len(self), dtype=bool)
        for key, value in filters:
            keep &= self._matches(key, value)
        return np.flatnonzero(keep)

    def _matches(self, key: str, value: str) -> np.ndarray:
        if key == "host":
            return np.array([fnmatch.fnmatchcase(n, value) for n in self.names], dtype=bool)
        if key == "state":
            return self.up if _choice(key, value, ("up", "down")) == "up" else ~self.up
        if key == "status":
            disabled = _choice(key, value, ("enabled", "disabled")) == "disabled"
            return self.disabled if disabled else ~self.disabled
        if key == "trait":
            return _members(self.traits, [value in t for t in self.trait_sets])
        if key == "aggregate":
            wanted = {u for u, name in self.aggregate_names.items() if value in (u, name)}
            if not wanted:
                raise InvalidRequest(reason=f"no aggregate named {value!r}")
            return _members(self.aggregates, [bool(wanted & a) for a in self.aggregate_sets])
        raise InvalidRequest(reason=f"unknown filter {key!r}; known: {', '.join(sorted(FILTERS))}")

    def order(self, rows: np.ndarray, key: str, reverse: bool = False) -> np.ndarray:
        """``rows`` sorted by ``key`` (:data:`SORTS`, or ``used:RC``, ``free:RC``,
        ``fill:RC``), ties by host name; a host without the class sorts last.

        :raises InvalidRequest: an unknown key or resource class.
        """
        if key == "host":
            return rows[::-1] if reverse else rows  # the table is by name
        missing = np.zeros(len(rows), dtype=bool)
        if key in ("consumers", "failed_builds", "last_seen"):
            values = getattr(self, key)[rows].astype(np.float64)
        else:
            kind, _, rc = key.partition(":")
            if kind not in SORTS_BY_CLASS or not rc:
                raise InvalidRequest(
                    reason=f"unknown sort key {key!r}; known: {', '.join(SORTS)}, "
                    + ", ".join(f"{k}:RESOURCE_CLASS" for k in SORTS_BY_CLASS)
                )
            if rc not in self.used:
                raise InvalidRequest(
                    reason=f"no host has resource class {rc!r}; known: " + ", ".join(self.classes)
                )
            used = self.used[rc][rows].astype(np.float64)
            cap = self.capacity[rc][rows].astype(np.float64)
            missing = ~self.has_class[rc][rows]
            if kind == "used":
                values = used
            elif kind == "free":
                values = cap - used
            else:
                values = np.divide(used, cap, out=np.zeros_like(used), where=cap > 0)
        # Stable sorts: by name (the table's order), then by value, absent last.
        by = np.argsort(-values if reverse else values, kind="stable")
        by = by[np.argsort(missing[by], kind="stable")]
        return rows[by]

    # --- what is printed --------------------------------------------------------------

    def row(self, i: int) -> dict[str, Any]:
        """Host ``i`` as ``hosts --json`` prints it."""
        (row,) = self.rows(np.array([i], dtype=np.int64))
        return row

    def rows(self, rows: np.ndarray, page: int = 1000) -> Iterator[dict[str, Any]]:
        """The hosts ``rows``, in that order, as ``hosts --json`` prints them:
        made ``page`` at a time from slices of the columns (no host's row is
        kept once it is handed out)."""
        classes = self.classes
        for start in range(0, len(rows), page):
            at = rows[start : start + page]
            up = self.up[at].tolist()
            service = self.has_service[at].tolist()
            disabled = self.disabled[at].tolist()
            failed = self.failed_builds[at].tolist()
            consumers = self.consumers[at].tolist()
            seen = self.last_seen[at].tolist()
            traits = self.traits[at].tolist()
            aggregates = self.aggregates[at].tolist()
            used = {rc: self.used[rc][at].tolist() for rc in classes}
            cap = {rc: self.capacity[rc][at].tolist() for rc in classes}
            has = {rc: self.has_class[rc][at].tolist() for rc in classes}
            for n, i in enumerate(at.tolist()):
                yield {
                    "host": self.names[i],
                    "uuid": self.uuids[i],
                    "up": up[n],
                    "disabled": disabled[n],
                    "disabled_reason": self.disabled_reasons[i],
                    "failed_builds": failed[n],
                    "consumers": consumers[n],
                    "last_seen": seen[n] if service[n] else None,
                    "usage": {
                        rc: {"used": used[rc][n], "capacity": cap[rc][n]}
                        for rc in classes
                        if has[rc][n]
                    },
                    "traits": self.trait_names[traits[n]],
                    "aggregates": self.aggregate_labels[aggregates[n]],
                }

    def totals(self, rows: np.ndarray) -> dict[str, dict[str, int]]:
        """Used and capacity per class summed over ``rows``."""
        return {
            rc: {
                "used": int(self.used[rc][rows].sum()),
                "capacity": int(self.capacity[rc][rows].sum()),
            }
            for rc in self.classes
            if self.has_class[rc][rows].any()
        }

    def by_aggregate(self) -> dict[str, Any]:
        """``usage aggregate --json``: per aggregate (by name, then uuid) its
        hosts and their usage; the hosts in none apart. A host in several
        aggregates counts in each."""
        out = []
        for uuid, name in sorted(self.aggregate_names.items(), key=lambda a: (a[1], a[0])):
            rows = np.flatnonzero(
                _members(self.aggregates, [uuid in a for a in self.aggregate_sets])
            )
            out.append(
                {"uuid": uuid, "name": name, "hosts": len(rows), "usage": self.totals(rows)}
            )
        alone = np.flatnonzero(_members(self.aggregates, [not a for a in self.aggregate_sets]))
        return {
            "aggregates": out,
            "no_aggregate": {"hosts": len(alone), "usage": self.totals(alone)},
        }


def _choice(key: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise InvalidRequest(reason=f"filter {key} must be {' or '.join(choices)}, got {value!r}")
    return value


def _members(codes: np.ndarray, code_matches: Sequence[bool]) -> np.ndarray:
    """Per host, whether its shared value (by code) matches."""
    table = np.array(list(code_matches) or [False], dtype=bool)
    return table[codes] if len(codes) else np.zeros(0, dtype=bool)


def provider_usage(provider: Provider) -> dict[str, Any]:
    """``usage provider --json``: one provider's inventories and usage, as
    ``openstack resource provider usage show`` and ``inventory list`` give
    them together."""
    return {
        "uuid": provider.uuid,
        "name": provider.name,
        "root_uuid": provider.root_uuid or provider.uuid,
        "generation": provider.generation,
        "consumers": provider.consumers,
        "usage": {
            rc: {
                "used": provider.usages.get(rc, 0),
                "capacity": inv.capacity,
                "total": inv.total,
                "reserved": inv.reserved,
                "allocation_ratio": inv.allocation_ratio,
                "min_unit": inv.min_unit,
                "max_unit": inv.effective_max_unit,
                "step_size": inv.step_size,
            }
            for rc, inv in sorted(provider.inventories.items(), key=lambda i: class_order(i[0]))
        },
    }


def project_usage(consumers: Iterator[Consumer], project: str | None = None) -> dict[str, Any]:
    """``usage project --json``: per project (or only ``project``), how many
    consumers hold allocations (instances, and migrations during a move) and
    what they hold per class, summed as the consumers are read (a page at a
    time: none is kept)."""
    held: dict[str, Counter[str]] = {}
    count: Counter[str] = Counter()
    for consumer in consumers:
        if project is not None and consumer.project_id != project:
            continue
        count[consumer.project_id] += 1
        sums = held.setdefault(consumer.project_id, Counter())
        for amounts in consumer.allocations.values():
            sums.update(amounts)
    return {
        "projects": [
            {
                "project_id": p,
                "consumers": count[p],
                "usage": {rc: {"used": held[p][rc]} for rc in sorted(held[p], key=class_order)},
            }
            for p in sorted(count)
        ]
    }
