"""The placement rules, each written once.

What a provider can give, which amounts its unit rules allow, whether a
server group's strict policy lets a member onto a host, and whether a
compute host is up: every part of the project that asks one of these
questions calls this module. The functions take plain numbers, or numpy
arrays of them (one element per host or provider) where the signature says
so: the in-memory store and the admin command ask about one provider, the
host view about all of them at once, with the same definitions.

The Redis claim script (:mod:`scheduler.store.scripts`) must enforce the
capacity, unit and group rules inside Redis, where Python cannot run. It is
the one other place they are written, and a differential property test
(``tests/unit/store/test_rules_differential.py``) runs the script and these
functions on the same random inputs and requires the same answer, with the
same typed error, every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, overload

import numpy as np

from scheduler.exceptions import (
    CapacityExceeded,
    GroupPolicyViolation,
    NoSuchInventory,
    UnitRuleViolation,
)

#: The strict server-group policies (a claim enforces them; the soft ones only weigh).
AFFINITY = "affinity"
ANTI_AFFINITY = "anti-affinity"

# --- capacity and unit rules ---------------------------------------------------------


def capacity(total: int, reserved: int, allocation_ratio: float) -> int:
    """What a provider can give of a class: ``int((total - reserved) * ratio)``,
    truncated toward zero as Placement does (negative when reserved exceeds total)."""
    return int((total - reserved) * allocation_ratio)


def effective_max_unit(total: int, max_unit: int | None) -> int:
    """The largest amount one allocation may take: ``max_unit``, never above the total
    (None: the total), so no request exceeds the host's total whatever the ratio."""
    return total if max_unit is None else min(max_unit, total)


def unit_rule_broken(
    amount: int, min_unit: int, max_unit: int, step_size: int
) -> tuple[str, int] | None:
    """The unit rule ``amount`` breaks, with its limit, checked in this order:
    min_unit, max_unit (already effective), step_size; None if it keeps them all."""
    if amount < min_unit:
        return "min_unit", min_unit
    if amount > max_unit:
        return "max_unit", max_unit
    if amount % step_size:
        return "step_size", step_size
    return None


def units_allow(
    amount: int, min_unit: np.ndarray, max_unit: np.ndarray, step_size: np.ndarray
) -> np.ndarray:
    """:func:`unit_rule_broken` over arrays: a mask of the providers whose unit
    rules allow ``amount`` (True exactly where it returns None)."""
    return (min_unit <= amount) & (max_unit >= amount) & (amount % step_size == 0)


class InventoryRules(Protocol):
    """What :func:`check_allocation` reads of an inventory
    (:class:`scheduler.store.base.Inventory` has it)."""

    @property
    def min_unit(self) -> int: ...
    @property
    def effective_max_unit(self) -> int: ...
    @property
    def step_size(self) -> int: ...
    @property
    def capacity(self) -> int: ...


def free(inventory: InventoryRules, used: int) -> int:
    """What of an inventory is left to allocate, with ``used`` taken."""
    return inventory.capacity - used


def check_allocation(
    uuid: str, rc: str, amount: int, inventory: InventoryRules | None, used: int
) -> None:
    """Whether one provider can give ``amount`` of ``rc`` now, as the claim checks it.

    :raises NoSuchInventory: the provider has no inventory of the class.
    :raises UnitRuleViolation: the amount breaks min_unit, max_unit or step_size.
    :raises CapacityExceeded: the amount is more than is free.
    """
    if inventory is None:
        raise NoSuchInventory(uuid=uuid, rc=rc)
    broken = unit_rule_broken(
        amount, inventory.min_unit, inventory.effective_max_unit, inventory.step_size
    )
    if broken is not None:
        raise UnitRuleViolation(
            uuid=uuid, rc=rc, requested=amount, rule=broken[0], limit=broken[1]
        )
    left = free(inventory, used)
    if amount > left:
        raise CapacityExceeded(uuid=uuid, rc=rc, requested=amount, free=left)


# --- server groups -------------------------------------------------------------------


@overload
def group_allows(
    policy: str, here: int, has_members: bool, max_server_per_host: int = 1, own: int = 0
) -> bool: ...
@overload
def group_allows(
    policy: str,
    here: np.ndarray,
    has_members: bool,
    max_server_per_host: int = 1,
    own: int | np.ndarray = 0,
) -> np.ndarray: ...
def group_allows(
    policy: str,
    here: int | np.ndarray,
    has_members: bool,
    max_server_per_host: int = 1,
    own: int | np.ndarray = 0,
) -> bool | np.ndarray:
    """Whether a strict ``policy`` lets one more member onto a host holding
    ``here`` members (an int, or an array of counts per host) of a group that
    ``has_members`` anywhere. Anti-affinity: fewer than ``max_server_per_host``
    there, not counting the ``own`` of them (0 or 1, per host like ``here``)
    that are the placed instance's own membership: a move's migration
    consumer holds it on the source, and the instance may come back beside
    itself there (as Nova accepts the host already running the instance).
    Affinity: the group is empty, or the host holds members (its own
    membership counts: it ties the instance to its host). A soft policy
    always allows (it only weighs)."""
    if policy == ANTI_AFFINITY:
        return here - own < max_server_per_host
    if policy == AFFINITY:
        return (here > 0) | (not has_members)
    return np.ones_like(here, dtype=bool) if isinstance(here, np.ndarray) else True


def check_group(
    group_uuid: str,
    policy: str,
    host: str,
    members: Mapping[str, int],
    max_server_per_host: int = 1,
    own_host: str | None = None,
) -> None:
    """Whether a claim may add a member of the group on ``host``, given the
    group's ``members`` per host and ``own_host``, where the claimant's own
    membership is counted among them (a move's migration consumer on the
    source; None: nowhere), which :func:`group_allows` does not hold against it.

    :raises GroupPolicyViolation: the strict policy forbids it.
    """
    if not group_allows(
        policy,
        members.get(host, 0),
        any(n > 0 for n in members.values()),
        max_server_per_host,
        int(own_host == host),
    ):
        raise GroupPolicyViolation(group=group_uuid, policy=policy, host=host)


# --- liveness ------------------------------------------------------------------------


@overload
def is_up(now: float, last_seen: float, service_down_time: float) -> bool: ...
@overload
def is_up(now: float, last_seen: np.ndarray, service_down_time: float) -> np.ndarray: ...
def is_up(
    now: float, last_seen: float | np.ndarray, service_down_time: float
) -> bool | np.ndarray:
    """Whether a host last seen at ``last_seen`` (a time, or an array of them)
    is up at ``now``: ``|now - last_seen| <= service_down_time``, as Nova's
    servicegroup judges it (a clock that went back counts as recent)."""
    up = np.abs(now - last_seen) <= service_down_time
    return up if isinstance(up, np.ndarray) else bool(up)
