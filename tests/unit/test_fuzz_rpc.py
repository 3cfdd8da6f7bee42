"""The RPC API's calls under hypothesis (see :mod:`tests.unit.fuzz_rig`):
``select_destinations`` drawn from every kind of request, and garbage in
every argument. Every case gets a clear error or a correct decision."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import strategies as fuzz
from tests.unit.fuzz_rig import (
    CASES,
    FUZZ,
    TRIED,
    Rig,
    assert_still_serves,
    running_rig,
    select_case,
)

PROPERTIES = ("select_destinations", "garbage")


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with running_rig() as r:
        yield r


def test_select_destinations_gives_a_clear_error_or_a_correct_decision(rig: Rig) -> None:
    @settings(FUZZ, max_examples=CASES["select_destinations"])
    @given(
        kind=fuzz.contexts,
        data=st.data(),
        spec=fuzz.any_request_spec,
        alternates=fuzz.weighted((9, st.booleans()), (1, fuzz.bad_scalars)),
    )
    def case(kind: str, data: st.DataObject, spec: Any, alternates: Any) -> None:
        raw_uuids = data.draw(fuzz.instance_uuids_for(spec))
        select_case(rig, kind, spec, raw_uuids, alternates, "select_destinations")

    case()
    assert TRIED["select_destinations"] >= CASES["select_destinations"]
    assert rig.outcomes["placed"] and rig.outcomes["no_valid_host"] and rig.outcomes["invalid"]


def test_garbage_in_every_argument_gets_a_clear_error(rig: Rig) -> None:
    @settings(FUZZ, max_examples=CASES["garbage"])
    @given(
        kind=fuzz.contexts,
        spec=fuzz.json_values,
        raw_uuids=fuzz.json_values,
        alternates=fuzz.json_values,
    )
    def case(kind: str, spec: Any, raw_uuids: Any, alternates: Any) -> None:
        select_case(rig, kind, spec, raw_uuids, alternates, "garbage")

    case()
    assert TRIED["garbage"] >= CASES["garbage"]


def test_the_worker_still_serves_after_every_case(rig: Rig) -> None:
    assert_still_serves(rig, PROPERTIES)
