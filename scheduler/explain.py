"""The answer to "why no host?": what ``explain`` returns.

Each decision of the engine leaves an :class:`InstanceTrace` per instance
(survivors per stage, rejections per reason, the top weighed hosts with each
weigher's share), for its logs and for this answer; the traces are kept here,
below the engine, so that what reads them never imports the pipeline.

An :class:`ExplainReport` is built from the engine's decision traces of a dry
run (:meth:`scheduler.engine.pipeline.Engine.explain`, nothing claimed) and
crosses the RPC boundary as primitives. Per instance it holds each stage's
survivors, the hosts removed per reason (a host is counted once, by the first
stage that removed it) and the best weighed hosts with each weigher's
contribution to their weight.

Asked for all hosts, each instance also carries its :class:`InstanceHosts`:
per stage (each request filter, the candidate step, each host filter in
order) the surviving hosts by name and the reason of every host removed, and
the whole weighed list, best first, with each weigher's normalised value,
multiplier and contribution. The engine records those names only when asked
(a decision of ``select_destinations`` never pays for them).

One host filter run alone on every host of the view
(:meth:`~scheduler.engine.pipeline.Engine.run_filter`) answers with a
:class:`StageHosts` too: which hosts it would remove for a request, and why.

Everything here is admin-only: it names hosts, filters, traits and
aggregates. Users only ever see ``NoValidHost.USER_MESSAGE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from scheduler.exceptions import InvalidRequest
from scheduler.priority import PriorityClass

if TYPE_CHECKING:
    from scheduler.objects import RequestSpec


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidRequest(reason=f"{what} must be an object, got {type(data).__name__}")
    return data


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _priority_class(data: Any) -> PriorityClass | None:
    """A report's priority class (absent from a worker that knows none: None)."""
    if data is None:
        return None
    data = _mapping(data, "priority_class")
    return PriorityClass(
        name=str(data["name"]),
        priority=int(data["priority"]),
        preemptible=data["preemptible"] is True,
        preemption_policy=str(data["preemption_policy"]),
    )


def summary_line(available: int, hosts: int, reasons: Mapping[str, int]) -> str:
    """``0/1200 hosts available: 800 insufficient MEMORY_MB, 100 disabled``.

    Reasons are listed most hosts first (ties by name), as an operator reads
    them: the biggest obstacle leads.
    """
    ordered = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    counts = ", ".join(f"{n} {reason}" for reason, n in ordered if n)
    return f"{available}/{hosts} hosts available" + (f": {counts}" if counts else "")


@dataclass(frozen=True)
class StageSurvivors:
    """How many hosts were left after one stage (``candidates`` or a filter)."""

    stage: str
    survivors: int


@dataclass(frozen=True)
class WeighedHostReport:
    """One of the best weighed hosts: its weight and each weigher's part of it.

    A contribution is the weigher's normalised score times its multiplier;
    the contributions add up to ``weight``.
    """

    host: str
    weight: float
    contributions: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "contributions", _frozen(self.contributions))


@dataclass(frozen=True)
class StageHosts:
    """One stage by name: the hosts it kept and, per host it removed, why.

    ``kind`` is :data:`REQUEST_FILTER`, :data:`CANDIDATE_STEP` or
    :data:`HOST_FILTER`. ``skipped`` is a host filter the request gave
    nothing to check (it kept every host). ``survivors`` keep the view's
    order; a host already removed by an earlier stage is not in ``removed``.
    """

    stage: str
    kind: str
    survivors: tuple[str, ...]
    removed: Mapping[str, str] = field(default_factory=dict)
    skipped: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "survivors", tuple(self.survivors))
        object.__setattr__(self, "removed", _frozen(self.removed))

    @property
    def hosts(self) -> int:
        """The hosts the stage was asked about."""
        return len(self.survivors) + len(self.removed)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "kind": self.kind,
            "survivors": list(self.survivors),
            "removed": dict(self.removed),
            "skipped": self.skipped,
        }

    @classmethod
    def from_primitive(cls, data: Any) -> StageHosts:
        data = _mapping(data, "stage")
        try:
            return cls(
                stage=str(data["stage"]),
                kind=str(data["kind"]),
                survivors=tuple(str(h) for h in data["survivors"]),
                removed={str(k): str(v) for k, v in _mapping(data["removed"], "removed").items()},
                skipped=bool(data["skipped"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRequest(reason=f"malformed stage: {exc!r}") from None


#: :attr:`StageHosts.kind` values.
REQUEST_FILTER = "request filter"
CANDIDATE_STEP = "candidates"
HOST_FILTER = "host filter"


@dataclass(frozen=True)
class WeigherShare:
    """One weigher's part of a host's weight: ``contribution`` is ``multiplier``
    (the configured one or its aggregate override, signed as applied) times
    ``normalised`` (the weigher's raw value scaled to [0, 1] over the candidates)."""

    normalised: float
    multiplier: float
    contribution: float


@dataclass(frozen=True)
class WeighedHostDetail:
    """A weighed host with every weigher's :class:`WeigherShare`, by weigher name."""

    host: str
    weight: float
    shares: Mapping[str, WeigherShare] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shares", _frozen(self.shares))

    def to_primitive(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "weight": self.weight,
            "shares": {
                name: {
                    "normalised": s.normalised,
                    "multiplier": s.multiplier,
                    "contribution": s.contribution,
                }
                for name, s in self.shares.items()
            },
        }

    @classmethod
    def from_primitive(cls, data: Any) -> WeighedHostDetail:
        data = _mapping(data, "weighed host")
        return cls(
            host=str(data["host"]),
            weight=float(data["weight"]),
            shares={
                str(name): WeigherShare(
                    float(s["normalised"]), float(s["multiplier"]), float(s["contribution"])
                )
                for name, s in _mapping(data["shares"], "shares").items()
            },
        )


@dataclass(frozen=True)
class InstanceHosts:
    """One instance's dry run host by host: each stage in order, then the whole
    weighed list, best first (in the order the pick draws from, ties broken as
    ``select_destinations`` breaks them for the same request id and uuid)."""

    stages: tuple[StageHosts, ...] = ()
    weighed: tuple[WeighedHostDetail, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "weighed", tuple(self.weighed))

    def stage(self, name: str) -> StageHosts:
        """The stage called ``name``.

        :raises KeyError: no stage of that name ran.
        """
        for stage in self.stages:
            if stage.stage == name:
                return stage
        raise KeyError(name)

    def to_primitive(self) -> dict[str, Any]:
        return {
            "stages": [s.to_primitive() for s in self.stages],
            "weighed": [w.to_primitive() for w in self.weighed],
        }

    @classmethod
    def from_primitive(cls, data: Any) -> InstanceHosts:
        data = _mapping(data, "hosts")
        return cls(
            stages=tuple(StageHosts.from_primitive(s) for s in data["stages"]),
            weighed=tuple(WeighedHostDetail.from_primitive(w) for w in data["weighed"]),
        )


# --- the engine's trace of a decision ---------------------------------------------------


@dataclass(frozen=True)
class StageCount:
    """How many hosts were left after a stage."""

    stage: str
    survivors: int


@dataclass(frozen=True)
class WeighedHost:
    """A weighed host, its total weight and each weigher's share of it."""

    host: str
    weight: float
    contributions: Mapping[str, float]


@dataclass
class InstanceTrace:
    """How one instance's decision was made.

    ``reasons`` counts the hosts each reason removed; a host is counted once,
    by the first stage that removed it, so when no host is left the counts
    add up to ``hosts``.
    """

    instance_uuid: str
    hosts: int
    position: int = 0
    instances: int = 1
    stages: list[StageCount] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)
    top: list[WeighedHost] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    host: str | None = None
    reused: bool = False
    #: Each stage's hosts by name, recorded only when a dry run asks for all
    #: hosts (None otherwise: nothing is listed), and the whole weighed list.
    by_name: list[StageHosts] | None = None
    weighed: list[WeighedHostDetail] = field(default_factory=list)

    @property
    def detail(self) -> InstanceHosts | None:
        """The host-by-host account, when it was recorded."""
        if self.by_name is None:
            return None
        return InstanceHosts(tuple(self.by_name), tuple(self.weighed))

    def survived(self, stage: str, survivors: int) -> None:
        self.stages.append(StageCount(stage, survivors))

    def reject(self, reason: str, count: int) -> None:
        if count:
            self.reasons[reason] = self.reasons.get(reason, 0) + count

    def details(self) -> str:
        """The admin-facing summary, e.g. ``0/20 hosts available: 15 insufficient MEMORY_MB``."""
        counts = ", ".join(f"{n} {reason}" for reason, n in self.reasons.items())
        details = f"0/{self.hosts} hosts available" + (f": {counts}" if counts else "")
        if self.instances > 1:
            details += f" (instance {self.position + 1} of {self.instances})"
        return details


# --- the report --------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceExplanation:
    """The dry-run decision for one instance of the request.

    ``host`` is where it would go, or None when no host was left for it.
    ``detail`` is its host-by-host account, when all hosts were asked for.
    ``instance_uuid`` is the uuid the dry run drew its ties with (None from
    a worker that does not report it).
    """

    position: int
    hosts: int
    stages: tuple[StageSurvivors, ...]
    reasons: Mapping[str, int]
    top: tuple[WeighedHostReport, ...]
    host: str | None
    instance_uuid: str | None = None
    detail: InstanceHosts | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "top", tuple(self.top))
        object.__setattr__(self, "reasons", _frozen(self.reasons))

    @property
    def placed(self) -> bool:
        return self.host is not None

    @property
    def available(self) -> int:
        """Hosts that passed every stage (0 when the instance found none)."""
        if not self.placed:
            return 0
        return self.stages[-1].survivors if self.stages else self.hosts

    @property
    def summary(self) -> str:
        return summary_line(self.available, self.hosts, self.reasons)

    @classmethod
    def from_trace(cls, trace: InstanceTrace) -> InstanceExplanation:
        return cls(
            position=trace.position,
            hosts=trace.hosts,
            stages=tuple(StageSurvivors(s.stage, s.survivors) for s in trace.stages),
            reasons=dict(trace.reasons),
            top=tuple(
                WeighedHostReport(w.host, w.weight, dict(w.contributions)) for w in trace.top
            ),
            host=trace.host,
            instance_uuid=trace.instance_uuid,
            detail=trace.detail,
        )

    def to_primitive(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "hosts": self.hosts,
            "stages": [{"stage": s.stage, "survivors": s.survivors} for s in self.stages],
            "reasons": dict(self.reasons),
            "top": [
                {"host": w.host, "weight": w.weight, "contributions": dict(w.contributions)}
                for w in self.top
            ],
            "host": self.host,
            "instance_uuid": self.instance_uuid,
            "available": self.available,
            "summary": self.summary,
            **({"detail": self.detail.to_primitive()} if self.detail is not None else {}),
        }

    @classmethod
    def from_primitive(cls, data: Any) -> InstanceExplanation:
        data = _mapping(data, "explanation")
        try:
            return cls(
                position=int(data["position"]),
                hosts=int(data["hosts"]),
                stages=tuple(
                    StageSurvivors(str(s["stage"]), int(s["survivors"])) for s in data["stages"]
                ),
                reasons={str(k): int(v) for k, v in _mapping(data["reasons"], "reasons").items()},
                top=tuple(
                    WeighedHostReport(
                        str(w["host"]),
                        float(w["weight"]),
                        {str(k): float(v) for k, v in w["contributions"].items()},
                    )
                    for w in data["top"]
                ),
                host=data["host"] if data["host"] is None else str(data["host"]),
                instance_uuid=_optional_str(data.get("instance_uuid")),
                detail=(
                    InstanceHosts.from_primitive(data["detail"]) if data.get("detail") else None
                ),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRequest(reason=f"malformed explanation: {exc!r}") from None


@dataclass(frozen=True)
class WouldPreempt:
    """Where a request that finds no host would go by preempting, and whom:
    each victim's uuid, priority class and priority
    (:mod:`scheduler.engine.preemption`; nothing is evicted by explain)."""

    host: str
    victims: tuple[tuple[str, str | None, int], ...]

    def to_primitive(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "victims": [
                {"uuid": uuid, "priority_class": cls, "priority": priority}
                for uuid, cls, priority in self.victims
            ],
        }

    @classmethod
    def from_primitive(cls, data: Any) -> WouldPreempt | None:
        """A report's preemption (absent, or none found: None)."""
        if data is None:
            return None
        data = _mapping(data, "preemption")
        return cls(
            str(data["host"]),
            tuple(
                (str(v["uuid"]), _optional_str(v["priority_class"]), int(v["priority"]))
                for v in data["victims"]
            ),
        )

    def __str__(self) -> str:
        """``would preempt on HOST: UUID (CLASS, priority N), ...``"""
        victims = ", ".join(f"{u} ({c or 'no class'}, priority {p})" for u, c, p in self.victims)
        return f"would preempt on {self.host}: {victims}"


@dataclass(frozen=True)
class ExplainReport:
    """What ``explain`` found for a request spec, nothing claimed.

    ``instances`` holds one explanation per instance examined: all of them
    when the request would be placed; otherwise those up to and including
    the first that found no host (the engine stops there: all or nothing).
    Only the first and the last examined keep their top weighed hosts (a
    thousand-instance request would otherwise answer with megabytes); each
    keeps its ``detail`` when all hosts were asked for (then the caller
    asked for the megabytes).
    ``weighers`` maps each weigher that ran to its multiplier (an enabled
    weigher whose multiplier is 0 does not run, and is left out).
    ``priority_class`` is the class the request's flavor chooses (None: no
    class, or a worker that knows none). ``preemption``: for a request that
    finds no host and whose class may preempt, where the instance that
    found none would go by evicting lower-priority preemptible instances,
    and which (None: it may not preempt, or no eviction makes room).
    """

    request_id: str
    flavor: str
    resources: Mapping[str, int]
    num_instances: int
    placeable: bool
    instances: tuple[InstanceExplanation, ...]
    weighers: Mapping[str, float] = field(default_factory=dict)
    priority_class: PriorityClass | None = None
    preemption: WouldPreempt | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", _frozen(self.resources))
        object.__setattr__(self, "instances", tuple(self.instances))
        object.__setattr__(self, "weighers", _frozen(self.weighers))

    @property
    def failed(self) -> InstanceExplanation | None:
        """The instance that found no host, if any."""
        return next((i for i in self.instances if not i.placed), None)

    @property
    def summary(self) -> str:
        """The failed instance's summary, or the first instance's when all fit."""
        chosen = self.failed or (self.instances[0] if self.instances else None)
        return chosen.summary if chosen else "no instance examined"

    @classmethod
    def build(
        cls,
        request_id: str,
        spec: RequestSpec,
        traces: Sequence[InstanceTrace],
        weighers: Mapping[str, float],
        placeable: bool,
        priority_class: PriorityClass | None = None,
        preemption: WouldPreempt | None = None,
    ) -> ExplainReport:
        instances = [InstanceExplanation.from_trace(t) for t in traces]
        for n in range(1, len(instances) - 1):
            instances[n] = replace(instances[n], top=())
        return cls(
            request_id=request_id,
            flavor=spec.flavor.name,
            resources=dict(spec.resources),
            num_instances=spec.num_instances,
            placeable=placeable,
            instances=tuple(instances),
            weighers=dict(weighers),
            priority_class=priority_class,
            preemption=preemption,
        )

    def to_primitive(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "flavor": self.flavor,
            "resources": dict(self.resources),
            "num_instances": self.num_instances,
            "placeable": self.placeable,
            "summary": self.summary,
            "weighers": dict(self.weighers),
            "priority_class": (
                self.priority_class.to_primitive() if self.priority_class is not None else None
            ),
            "preemption": self.preemption.to_primitive() if self.preemption else None,
            "instances": [i.to_primitive() for i in self.instances],
        }

    @classmethod
    def from_primitive(cls, data: Any) -> ExplainReport:
        data = _mapping(data, "explain report")
        try:
            return cls(
                request_id=str(data["request_id"]),
                flavor=str(data["flavor"]),
                resources={str(k): int(v) for k, v in data["resources"].items()},
                num_instances=int(data["num_instances"]),
                placeable=bool(data["placeable"]),
                instances=tuple(InstanceExplanation.from_primitive(i) for i in data["instances"]),
                weighers={str(k): float(v) for k, v in data["weighers"].items()},
                priority_class=_priority_class(data.get("priority_class")),
                preemption=WouldPreempt.from_primitive(data.get("preemption")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRequest(reason=f"malformed explain report: {exc!r}") from None
