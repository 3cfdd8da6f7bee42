"""The typed resource request: what a RequestSpec asks of providers.

:func:`parse_extra_specs` reads the flavor's own amounts
(:func:`flavor_amounts`) under its extra specs, and the image properties,
into a :class:`ResourceRequest` of request groups, in Placement's terms; its
:attr:`ResourceRequest.resources` is the one rule for what an instance takes
(what the engine claims, and what ``explain`` reports).
:attr:`RequestSpec.resource_request <scheduler.objects.RequestSpec.resource_request>`
calls it and :meth:`RequestSpec.from_primitive` asks for that, so a bad spec
is refused at validation with :class:`InvalidRequest` naming the spec,
before anything is claimed. This module knows nothing of the request
objects: :mod:`scheduler.objects` imports it, never the other way round.
Extra specs outside these forms (``hw:``, ``capabilities:``,
``aggregate_instance_extra_specs:`` ...) are left to the host filters.

Syntax (``N`` is a group suffix: digits, or ``_`` and up to 64 of
``[A-Za-z0-9_-]``; no suffix is the unsuffixed group):

``resourcesN:<RC>=<amount>``
    An amount of a resource class: a standard one (:data:`RESOURCE_CLASSES`)
    or ``CUSTOM_*``; an unknown standard name is refused. In the unsuffixed
    group it overrides the flavor (``resources:VCPU=4``), and 0 drops the
    class (``resources:DISK_GB=0``); a numbered group needs amounts > 0.
``traitN:<TRAIT>=required|forbidden``
    A required or forbidden trait (flavor). Image properties take
    ``trait:<TRAIT>=required`` only, into the unsuffixed group.
``requiredN=<clause>[&<clause>...]``
    Placement's ``required`` query parameter, one value holding what
    Placement would get as several parameters, joined by ``&``: a clause is
    a comma list of traits, each required or ``!``-forbidden
    (``A,!B``), or ``in:A,B``: at least one of them (any-of).
``member_ofN=<clause>[&<clause>...]``
    Placement's ``member_of``, several joined by ``&`` (all must hold): a
    clause is ``in:A,B`` (a member of any of them), ``A`` (a member of A),
    ``!A`` or ``!in:A,B`` (a member of none of them). Aggregates are named by
    uuid or by name.
``group_policy=none|isolate``
    Whether numbered groups may share a provider; required, as in Nova,
    when there is more than one numbered group.

Where the groups land (see :mod:`scheduler.engine.placement`): the
unsuffixed group may be split across a host's provider tree (each resource
class from one provider); each numbered group lands on one provider;
``isolate`` puts numbered groups on distinct providers. The compute node's
own conditions added by request filters (disabled, zone, tenant, image type)
are :class:`HostConstraint`s, each with the reason it rejects hosts under.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from scheduler.exceptions import InvalidRequest

#: The classes a flavor's own sizes ask for (:func:`flavor_amounts`).
VCPU = "VCPU"
MEMORY_MB = "MEMORY_MB"
DISK_GB = "DISK_GB"
#: Placement's standard resource classes; any other name must be ``CUSTOM_*``.
RESOURCE_CLASSES = frozenset(
    {
        "VCPU",
        "MEMORY_MB",
        "DISK_GB",
        "PCPU",
        "PCI_DEVICE",
        "SRIOV_NET_VF",
        "NUMA_SOCKET",
        "NUMA_CORE",
        "NUMA_THREAD",
        "NUMA_MEMORY_MB",
        "IPV4_ADDRESS",
        "VGPU",
        "VGPU_DISPLAY_HEAD",
        "NET_BW_EGR_KILOBIT_PER_SEC",
        "NET_BW_IGR_KILOBIT_PER_SEC",
        "MEM_ENCRYPTION_CONTEXT",
        "FPGA",
        "PGPU",
        "NET_PACKET_RATE_KILOPACKET_PER_SEC",
        "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
        "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
    }
)
#: The trait a disabled compute service's root provider carries.
COMPUTE_STATUS_DISABLED = "COMPUTE_STATUS_DISABLED"
GROUP_POLICIES = ("none", "isolate")
#: The largest amount one group may ask of one class.
MAX_AMOUNT = 2**31 - 1

_SUFFIX = r"(?P<suffix>[0-9]+|_[A-Za-z0-9_-]{1,64})?"
_RESOURCES = re.compile(rf"resources{_SUFFIX}:(?P<name>.*)")
_TRAIT = re.compile(rf"trait{_SUFFIX}:(?P<name>.*)")
_REQUIRED = re.compile(rf"required{_SUFFIX}")
_MEMBER_OF = re.compile(rf"member_of{_SUFFIX}")
_CUSTOM_RC = re.compile(r"CUSTOM_[A-Z0-9_]+")
_TRAIT_NAME = re.compile(r"[A-Z0-9_]{1,255}")
_AMOUNT = re.compile(r"[0-9]{1,10}")


def is_placement_key(key: str) -> bool:
    """Whether an extra spec without a namespace is one this module reads
    (``group_policy``, ``required[N]``, ``member_of[N]``), so no host filter
    should take it for a capability or aggregate key."""
    return (
        key == "group_policy"
        or _REQUIRED.fullmatch(key) is not None
        or _MEMBER_OF.fullmatch(key) is not None
    )


def valid_resource_class(rc: str) -> bool:
    """A standard class, or ``CUSTOM_`` and upper-case letters, digits, underscores."""
    return rc in RESOURCE_CLASSES or _CUSTOM_RC.fullmatch(rc) is not None


def valid_trait(trait: str) -> bool:
    """Upper-case letters, digits and underscores (standard or ``CUSTOM_*``)."""
    return _TRAIT_NAME.fullmatch(trait) is not None


# --- the request ----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestGroup:
    """Resources and conditions that land together (Placement's request group).

    ``any_traits``: each set needs at least one of its traits. ``member_of``:
    each set needs membership of at least one of its aggregates (uuids or
    names); all sets must hold. A provider's aggregates include its root's.
    """

    suffix: str = ""
    resources: Mapping[str, int] = field(default_factory=dict)
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    any_traits: tuple[frozenset[str], ...] = ()
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggregates: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", MappingProxyType(dict(self.resources)))

    @property
    def numbered(self) -> bool:
        return bool(self.suffix)

    @property
    def label(self) -> str:
        return f"group {self.suffix}" if self.suffix else "the unsuffixed group"


@dataclass(frozen=True)
class HostConstraint:
    """A condition on the compute node itself (the root provider).

    Request filters add these; hosts failing one are counted under
    ``reason``, and the hosts left after it under ``stage``. ``member_of``
    (and ``hosts``) None sets no condition; an empty set matches no host (how
    a filter says "nothing can serve this request", with why).
    """

    reason: str
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    member_of: frozenset[str] | None = None
    forbidden_aggregates: frozenset[str] = frozenset()
    #: Host names the node must be one of (None: any), and those it must not
    #: be (hosts already tried); both matched ignoring case when
    #: ``ignore_case`` (as forced and ignored hosts are).
    hosts: frozenset[str] | None = None
    forbidden_hosts: frozenset[str] = frozenset()
    ignore_case: bool = False
    #: Who added it (a request filter's name), for the trace's stages.
    stage: str = field(default="", compare=False)


@dataclass(frozen=True)
class ResourceRequest:
    """Request groups (the unsuffixed one first), their policy, host constraints."""

    groups: tuple[RequestGroup, ...]
    group_policy: str | None = None
    host_constraints: tuple[HostConstraint, ...] = ()

    @property
    def unsuffixed(self) -> RequestGroup:
        return self.groups[0]

    @property
    def numbered(self) -> tuple[RequestGroup, ...]:
        return self.groups[1:]

    @property
    def isolate(self) -> bool:
        return self.group_policy == "isolate"

    @property
    def resources(self) -> dict[str, int]:
        """Amount per resource class across all groups (what one instance takes)."""
        total: dict[str, int] = {}
        for group in self.groups:
            for rc, amount in group.resources.items():
                total[rc] = total.get(rc, 0) + amount
        return total

    @property
    def required_traits(self) -> frozenset[str]:
        """Every trait some group requires (for aggregates isolated by traits)."""
        return frozenset().union(*(g.required_traits for g in self.groups))

    def with_constraint(self, constraint: HostConstraint) -> ResourceRequest:
        """A new request with one more host constraint (this one is left as it is)."""
        return replace(self, host_constraints=(*self.host_constraints, constraint))


# --- parsing ----------------------------------------------------------------------------


def _refuse(key: str, why: str) -> InvalidRequest:
    return InvalidRequest(reason=f"extra spec {key!r}: {why}")


def _resource_class(key: str, rc: str) -> str:
    if not valid_resource_class(rc):
        raise _refuse(key, f"unknown resource class {rc!r} (standard names or CUSTOM_*)")
    return rc


def _trait(key: str, trait: str) -> str:
    if not valid_trait(trait):
        raise _refuse(key, f"invalid trait name {trait!r}")
    return trait


def _amount(key: str, value: str, numbered: bool) -> int:
    if _AMOUNT.fullmatch(value) is None or int(value) > MAX_AMOUNT:
        raise _refuse(key, f"amount must be an integer from 0 to {MAX_AMOUNT}, got {value!r}")
    amount = int(value)
    if numbered and amount == 0:
        raise _refuse(key, "a numbered group needs an amount above 0")
    return amount


def _aggregate(key: str, token: str) -> str:
    token = token.strip()
    if not token or len(token) > 255:
        raise _refuse(key, "empty or overlong aggregate in the list")
    return token


def _clauses(key: str, value: str) -> list[str]:
    clauses = [c.strip() for c in value.split("&")]
    if not all(clauses):
        raise _refuse(key, "empty clause")
    return clauses


@dataclass
class _Draft:
    """A group being read (mutable while parsing only)."""

    resources: dict[str, int] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    any_of: list[frozenset[str]] = field(default_factory=list)
    member_of: list[frozenset[str]] = field(default_factory=list)
    not_member_of: set[str] = field(default_factory=set)
    keys: list[str] = field(default_factory=list)

    def freeze(self, suffix: str) -> RequestGroup:
        both = self.required & self.forbidden
        if both:
            label = f"group {suffix}" if suffix else "the unsuffixed group"
            raise InvalidRequest(
                reason=f"extra specs of {label} both require and forbid "
                f"trait(s) {', '.join(sorted(both))}"
            )
        return RequestGroup(
            suffix=suffix,
            resources={rc: n for rc, n in self.resources.items() if n > 0},
            required_traits=frozenset(self.required),
            forbidden_traits=frozenset(self.forbidden),
            any_traits=tuple(self.any_of),
            member_of=tuple(self.member_of),
            forbidden_aggregates=frozenset(self.not_member_of),
        )


def _read_required(draft: _Draft, key: str, value: str) -> None:
    for clause in _clauses(key, value):
        if clause.startswith("!in:"):
            raise _refuse(key, "'!in:' is not a trait clause (use !A,!B)")
        if clause.startswith("in:"):
            names = frozenset(_trait(key, t.strip()) for t in clause[3:].split(","))
            draft.any_of.append(names)
            continue
        for token in clause.split(","):
            token = token.strip()
            if token.startswith("!"):
                draft.forbidden.add(_trait(key, token[1:]))
            else:
                draft.required.add(_trait(key, token))


def _read_member_of(draft: _Draft, key: str, value: str) -> None:
    for clause in _clauses(key, value):
        forbid = clause.startswith("!")
        body = clause[1:] if forbid else clause
        if body.startswith("in:"):
            names = frozenset(_aggregate(key, a) for a in body[3:].split(","))
        elif "," in body:
            raise _refuse(key, "a list of aggregates needs 'in:' (in:A,B)")
        else:
            names = frozenset({_aggregate(key, body)})
        if forbid:
            draft.not_member_of |= names
        else:
            draft.member_of.append(names)


def parse_extra_specs(
    base: Mapping[str, int],
    extra_specs: Mapping[str, str],
    image_properties: Mapping[str, str] = MappingProxyType({}),
) -> ResourceRequest:
    """The request for ``base`` amounts (the flavor's) under these extra specs.

    :raises InvalidRequest: a spec this module reads is malformed; the
        message names it.
    """
    drafts: dict[str, _Draft] = {"": _Draft(resources=dict(base))}
    policy: str | None = None
    for key in sorted(extra_specs):
        value = extra_specs[key]
        if key == "group_policy":
            if value not in GROUP_POLICIES:
                raise _refuse(key, f"must be one of {', '.join(GROUP_POLICIES)}, got {value!r}")
            policy = value
        elif match := _RESOURCES.fullmatch(key):
            suffix = match["suffix"] or ""
            draft = drafts.setdefault(suffix, _Draft())
            draft.resources[_resource_class(key, match["name"])] = _amount(
                key, value, bool(suffix)
            )
            draft.keys.append(key)
        elif match := _TRAIT.fullmatch(key):
            draft = drafts.setdefault(match["suffix"] or "", _Draft())
            trait = _trait(key, match["name"])
            if value == "required":
                draft.required.add(trait)
            elif value == "forbidden":
                draft.forbidden.add(trait)
            else:
                raise _refuse(key, f"must be 'required' or 'forbidden', got {value!r}")
            draft.keys.append(key)
        elif match := _REQUIRED.fullmatch(key):
            draft = drafts.setdefault(match["suffix"] or "", _Draft())
            _read_required(draft, key, value)
            draft.keys.append(key)
        elif match := _MEMBER_OF.fullmatch(key):
            draft = drafts.setdefault(match["suffix"] or "", _Draft())
            _read_member_of(draft, key, value)
            draft.keys.append(key)
    for key in sorted(image_properties):
        if match := _TRAIT.fullmatch(key):
            if match["suffix"]:
                raise _refuse(key, "image traits go to the unsuffixed group only")
            if image_properties[key] != "required":
                raise InvalidRequest(
                    reason=f"image property {key!r}: must be 'required', "
                    f"got {image_properties[key]!r}"
                )
            drafts[""].required.add(_trait(key, match["name"]))
    groups = [drafts[""].freeze("")]
    for suffix in sorted(s for s in drafts if s):
        draft = drafts[suffix]
        if not draft.resources:
            raise InvalidRequest(
                reason=f"extra specs {', '.join(draft.keys)}: group {suffix} has no resources"
            )
        groups.append(draft.freeze(suffix))
    if len(groups) > 2 and policy is None:
        raise InvalidRequest(
            reason="extra spec 'group_policy' (none or isolate) is required "
            "with more than one numbered request group"
        )
    request = ResourceRequest(groups=tuple(groups), group_policy=policy)
    if not request.resources:
        raise InvalidRequest(reason="the request asks for no resources at all")
    return request


def flavor_amounts(
    vcpus: int, memory_mb: int, root_gb: int, ephemeral_gb: int, swap_mb: int, is_bfv: bool
) -> dict[str, int]:
    """The flavor's own amounts: disk is root (not for volume-backed) + ephemeral + swap."""
    disk = (0 if is_bfv else root_gb) + ephemeral_gb + math.ceil(swap_mb / 1024)
    return {VCPU: vcpus, MEMORY_MB: memory_mb, DISK_GB: disk}
