"""A compute drops or hands back a move's allocation only when the instance's
record says that step of that migration is due on this host: a forged or
stale ``confirm_resize`` / ``revert_resize`` naming another instance's
migration (or a prep, a live migration's pre-check, of a move the record is
not under) is refused by the step guard (``step_refused``), and nothing
changes: not even the step's ledger remembers it."""

from __future__ import annotations

from typing import Any

import pytest

from compute_sim.ledger import LIVE, RESIZE
from scheduler.objects import ACTIVE, RESIZE_CONFIRMING, RESIZE_REVERTING, RESIZED
from scheduler.store import RunningInstance
from tests.fixtures import simulator
from tests.fixtures.simulator import (
    CTXT,
    INSTANCE,
    MIGRATION,
    SPEC,
    Sim,
    resized,
    selection,
)
from tests.unit.factories import uuid_of

#: The simulator suite's fixture.
make = simulator.make

OTHER = uuid_of("another-instance")
OTHER_MIGRATION = uuid_of("another-migration")


def holdings(sim: Sim) -> dict[str, set[str]]:
    """consumer -> the hosts it holds on."""
    names = {p.uuid: p.name for p in sim.store.list_providers()}
    return {c.uuid: {names[rp] for rp in c.allocations} for c in sim.store.list_consumers()}


def resizing_both(sim: Sim, task_state: str | None) -> dict[str, set[str]]:
    """INSTANCE resized h1 -> h2 (MIGRATION) with ``task_state``; another
    instance's migration parked on h3 too. What everyone holds."""
    sim.claim(MIGRATION, "h1")
    sim.claim(INSTANCE, "h2")
    sim.claim(OTHER_MIGRATION, "h3")
    sim.claim(OTHER, "h1")
    resized(sim, task_state)
    return holdings(sim)


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm", "revert"])
@pytest.mark.parametrize(
    "task, migration, changes, unmatched",
    [
        pytest.param(
            "ok",
            OTHER_MIGRATION,
            {},
            f"the record's migration is {MIGRATION}",
            id="another-instances-migration",
        ),
        pytest.param("ok", MIGRATION, {"state": ACTIVE}, "instance is ACTIVE", id="not-resized"),
        pytest.param(None, MIGRATION, {}, "task is None", id="nothing-begun"),
        pytest.param(
            "ok",
            MIGRATION,
            {"source_host": "elsewhere", "host": "elsewhere"},
            "is not served here",
            id="not-this-hosts-side",
        ),
    ],
)
def test_a_confirm_or_revert_the_record_does_not_wait_for_is_refused(
    make: Any,
    caplog: Any,
    confirm: bool,
    task: str | None,
    migration: str,
    changes: dict[str, Any],
    unmatched: str,
) -> None:
    sim = make(build_time=0.0)
    due = RESIZE_CONFIRMING if confirm else RESIZE_REVERTING
    before = resizing_both(sim, due if task == "ok" else None)
    sim.sim.vms.start(RunningInstance(INSTANCE), "h2")
    if changes:
        sim.record(**changes)
    step = sim.sim.confirm_resize if confirm else sim.sim.revert_resize
    step(CTXT, INSTANCE, migration)
    assert holdings(sim) == before, "nothing dropped or handed back"
    assert sim.sim.hosts_running(INSTANCE) == ["h2"]
    assert sim.conductor.names == [] and sim.compute.names == []
    [refused] = [r for r in caplog.records if "step_refused" in r.getMessage()]
    assert unmatched in refused.getMessage()


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm", "revert"])
def test_the_step_the_record_waits_for_goes_on(make: Any, confirm: bool) -> None:
    sim = make(build_time=0.0)
    resizing_both(sim, RESIZE_CONFIRMING if confirm else RESIZE_REVERTING)
    (sim.sim.confirm_resize if confirm else sim.sim.revert_resize)(CTXT, INSTANCE, MIGRATION)
    held = holdings(sim)
    assert MIGRATION not in held and held[INSTANCE] == ({"h2"} if confirm else {"h1"})
    assert held[OTHER_MIGRATION] == {"h3"} and held[OTHER] == {"h1"}


def test_a_prep_of_a_move_the_record_is_not_under_walks_nothing(make: Any) -> None:
    sim = make(build_time=0.0, fail_resize_hosts=("h2",))
    sim.claim(INSTANCE, "h2")  # ACTIVE on h2: a failed prep would release this
    sim.claim(OTHER_MIGRATION, "h1")
    sim.record(state=ACTIVE, host="h2")
    sim.sim.prep_resize(
        CTXT,
        INSTANCE,
        OTHER_MIGRATION,
        SPEC.flavor.to_primitive(),
        SPEC.to_primitive(),
        selection("h2").to_primitive(),
        [],
    )
    assert holdings(sim) == {INSTANCE: {"h2"}, OTHER_MIGRATION: {"h1"}}
    assert sim.conductor.names == [] and sim.compute.names == []
    assert sim.sim.ledger.get(INSTANCE, (RESIZE, OTHER_MIGRATION, "h2")) is None, (
        "refused before its ledger"
    )


def test_a_live_migration_check_of_a_move_the_record_is_not_under_is_refused(
    make: Any,
) -> None:
    sim = make(build_time=0.0)
    sim.sim.driver.live_migration_fail_hosts = {"h2"}  # a failed check would release the claim
    sim.claim(INSTANCE, "h2")
    sim.record(state=RESIZED, host="h2", migration_uuid=MIGRATION)
    sim.sim.check_can_live_migrate_destination(
        CTXT,
        INSTANCE,
        OTHER_MIGRATION,
        SPEC.to_primitive(),
        selection("h2").to_primitive(),
        [],
        "h1",
    )
    assert holdings(sim) == {INSTANCE: {"h2"}}
    assert sim.conductor.names == [] and sim.compute.names == []
    assert sim.sim.ledger.get(INSTANCE, (LIVE, OTHER_MIGRATION, "h2", "dest")) is None, (
        "refused before its ledger"
    )


@pytest.mark.parametrize("confirm", [True, False], ids=["confirm", "revert"])
def test_a_record_that_moves_on_after_the_guard_is_not_written_to(
    make: Any, caplog: Any, confirm: bool
) -> None:
    """The guard reads the record, then the step writes: the write itself
    checks the record again (state, migration, task) in the same atomic step,
    so a confirm (revert) whose record moved on in between drops (hands back)
    nothing. Here the step's body runs as if the guard had let it through
    just before the conductor gave the resize up."""
    sim = make(build_time=0.0)
    before = resizing_both(sim, RESIZE_CONFIRMING if confirm else RESIZE_REVERTING)
    sim.record(state=ACTIVE, task_state=None)  # given up after the guard's read
    op = sim.sim.resize.confirm if confirm else sim.sim.resize.revert
    op(CTXT, INSTANCE, MIGRATION)
    assert holdings(sim) == before, "nothing dropped or handed back"
    assert sim.conductor.names == [] and sim.compute.names == []
    [refused] = [r for r in caplog.records if "step_refused" in r.getMessage()]
    assert "at its write: instance is ACTIVE" in refused.getMessage()
