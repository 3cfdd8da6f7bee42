"""Why a host was not chosen: the reason strings, in one place.

Every stage that removes hosts counts them under one of these, so NoValidHost
and ``explain`` can say ``0/1200 hosts available: 800 insufficient MEMORY_MB,
300 missing trait HW_CPU_X86_AVX512F, 100 disabled``. The strings are part of
the admin interface (logs, fault details, explain output): keep them stable.
Host filters bring their own ``REASON``; these are the engine's.

A reason about a numbered request group carries the group's suffix, e.g.
``insufficient VGPU (group 1)``; the unsuffixed group's reasons have none.
"""

from __future__ import annotations

#: The compute service is disabled (the forbidden COMPUTE_STATUS_DISABLED trait).
DISABLED = "disabled"
#: The compute service stopped heartbeating (removed before the cut).
HOST_DOWN = "host down"
#: More candidates than ``max_placement_results``: the rest were not examined.
OVER_LIMIT = "beyond max_placement_results"
#: Another worker's claim got to the host first.
CLAIM_CONFLICT = "claim conflict"
#: The store refused the claim for the server group's policy (another worker
#: placed a member there first).
GROUP_CONFLICT = "server group policy (refused at claim)"
#: ``claim_attempts`` ran out before these hosts were tried.
NOT_TRIED = "not tried (claim_attempts exhausted)"
#: The host's tree has room for each request group alone, but not for all of
#: them together (shared capacity, or ``group_policy=isolate`` needs more
#: distinct providers than the tree has).
GROUPS_DO_NOT_FIT = "request groups do not fit together"
#: None of the aggregates a ``member_of`` clause names holds the host.
NOT_IN_AGGREGATE = "not in a required aggregate"
#: The host is in an aggregate the request forbids.
IN_FORBIDDEN_AGGREGATE = "in a forbidden aggregate"
#: Request filters' reasons.
UNKNOWN_ZONE = "unknown availability zone"
NOT_IN_ZONE = "not in the requested availability zone"
NOT_IN_TENANT_AGGREGATE = "not in an aggregate of the project"
NO_TENANT_AGGREGATE = "no aggregate for the project"
TRAIT_ISOLATED_AGGREGATE = "in an aggregate isolated by traits"
NOT_FORCED_HOST = "not a forced host"
NOT_FORCED_NODE = "not a forced node"
NOT_REQUESTED_DESTINATION = "not the requested destination"
#: A host a previous attempt of the request used (``ignore_hosts``).
ALREADY_TRIED = "host already tried"


def _group(reason: str, suffix: str) -> str:
    return f"{reason} (group {suffix.lstrip('_')})" if suffix else reason


def insufficient(rc: str, suffix: str = "") -> str:
    """No provider of the host (tree) has room for ``rc``."""
    return _group(f"insufficient {rc}", suffix)


def missing_trait(trait: str, suffix: str = "") -> str:
    """A required trait that no fitting provider of the host has."""
    return _group(f"missing trait {trait}", suffix)


def forbidden_trait(trait: str, suffix: str = "") -> str:
    """The host (or the only providers that fit) has a forbidden trait."""
    return _group(f"has forbidden trait {trait}", suffix)


def none_of_traits(traits: frozenset[str], suffix: str = "") -> str:
    """An any-of trait clause that no fitting provider meets."""
    return _group(f"none of traits {','.join(sorted(traits))}", suffix)


def aggregate(reason: str, suffix: str = "") -> str:
    """An aggregate reason (:data:`NOT_IN_AGGREGATE` ...) for a numbered group."""
    return _group(reason, suffix)


def image_type(disk_format: str) -> str:
    """The host does not support the image's disk format."""
    return f"image type {disk_format} not supported"
