"""The step ledger (:mod:`compute_sim.ledger`): what a step checking in learns
of what it had reached, and what a delete and a shelve leave of an instance."""

from __future__ import annotations

import time

import pytest

from compute_sim.ledger import BUILD, DELETED, DONE, FAILED, HANDED_ON, UNDER_WAY, StepLedger

KEY = (BUILD, "h1", "req-1")


@pytest.mark.parametrize(
    "reached, answer, after",
    [
        pytest.param(None, None, UNDER_WAY, id="new-attempt"),
        pytest.param(FAILED, None, UNDER_WAY, id="again-after-a-failure"),
        pytest.param(UNDER_WAY, UNDER_WAY, UNDER_WAY, id="duplicate-under-way"),
        pytest.param(HANDED_ON, HANDED_ON, HANDED_ON, id="re-drive-walks-on"),
        pytest.param(DONE, DONE, DONE, id="done-reports-again"),
    ],
)
def test_check_in(reached: str | None, answer: str | None, after: str) -> None:
    ledger = StepLedger()
    if reached is not None:
        ledger.record("i1", KEY, reached)
    assert ledger.check_in("i1", KEY) == answer
    assert ledger.get("i1", KEY) == after
    assert ledger.get("i1", (BUILD, "h2", "req-1")) is None, "other keys untouched"


def test_a_delete_forgets_the_steps_and_refuses_new_ones_for_the_retention() -> None:
    ledger = StepLedger(retention=0.05)
    ledger.check_in("i1", KEY)
    ledger.delete("i1")
    assert ledger.steps_of("i1") == {} and ledger.deleted("i1")
    assert ledger.check_in("i1", KEY) == DELETED and ledger.steps_of("i1") == {}
    time.sleep(0.1)
    ledger.delete("i2")  # the next delete prunes
    assert ledger.deleted_instances() == {"i2"}
    assert ledger.check_in("i1", KEY) is None


def test_a_shelve_forgets_the_steps_and_remembers_nothing() -> None:
    ledger = StepLedger()
    ledger.record("i1", KEY, DONE)
    ledger.forget("i1")
    assert ledger.steps_of("i1") == {} and not ledger.deleted("i1")
    assert ledger.check_in("i1", KEY) is None
