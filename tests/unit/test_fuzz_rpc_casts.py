"""The RPC API's casts and admin calls under hypothesis (see
:mod:`tests.unit.fuzz_rig`): ``run_instance`` fails cleanly or builds what it
claimed, with every ``.start`` ended; ``explain`` is admin-only and never
claims."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.exceptions import Forbidden, InvalidRequest, NoValidHost
from scheduler.explain import ExplainReport
from tests import strategies as fuzz
from tests.fixtures.manager import cast_builds
from tests.unit.fuzz_rig import (
    CASES,
    FUZZ,
    TRIED,
    Rig,
    assert_accounting,
    assert_correct_decision,
    assert_nothing_claimed,
    assert_still_serves,
    context,
    parsed,
    running_rig,
)

PROPERTIES = ("run_instance", "explain")


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    with running_rig() as r:
        yield r


def test_run_instance_fails_cleanly_or_builds_what_it_claimed(rig: Rig) -> None:
    @settings(FUZZ, max_examples=CASES["run_instance"])
    @given(kind=fuzz.contexts, data=st.data(), spec=fuzz.any_request_spec)
    def case(kind: str, data: st.DataObject, spec: Any) -> None:
        raw_uuids = data.draw(fuzz.instance_uuids_for(spec))
        TRIED["run_instance"] += 1
        rig.reset()
        ctxt = context(kind)
        rig.client.cast_raw(ctxt, "run_instance", request_spec=spec, instance_uuids=raw_uuids)
        assert rig.notifier.ended(ctxt.request_id).wait(10), "no .end: the cast was not served"
        mine = [
            (p, e, payload) for p, e, payload, rid in rig.notifier.sent if rid == ctxt.request_id
        ]
        errors = [payload for p, _, payload in mine if p == "error"]
        builds = cast_builds(rig.compute.calls)
        # Every .start has its .end; an ERROR notification or one .scheduled
        # per build in between; the builds in one cast.
        assert [e for _, e, _ in mine] == [
            "scheduler.run_instance.start",
            *(
                ["scheduler.run_instance"]
                if errors
                else ["scheduler.run_instance.scheduled"] * len(builds)
            ),
            "scheduler.run_instance.end",
        ]
        assert len(rig.compute.calls) == (1 if builds else 0)
        if errors:
            [error] = errors
            reason = error["reason"]
            assert (
                reason == NoValidHost.USER_MESSAGE
                or reason.startswith("invalid request: ")
                or reason.startswith("forbidden: ")
            ), reason
            assert builds == []
            assert_nothing_claimed(rig, raw_uuids)
            for name, args in rig.conductor.calls:
                assert name == "schedule_failed" and args[1] == reason
            rig.outcomes["run_instance_refused"] += 1
        else:
            uuids = list(raw_uuids)
            assert [args[0] for args in builds] == uuids
            assert_correct_decision(
                rig, kind, spec, uuids, [[args[2], *args[3]] for args in builds]
            )
            rig.outcomes["run_instance_built"] += 1
        assert_accounting(rig.store)
        assert rig.oslo_errors.records == []

    case()
    assert TRIED["run_instance"] >= CASES["run_instance"]


def test_explain_is_admin_only_and_never_claims(rig: Rig) -> None:
    @settings(FUZZ, max_examples=CASES["explain"])
    @given(kind=fuzz.contexts, spec=fuzz.any_request_spec)
    def case(kind: str, spec: Any) -> None:
        TRIED["explain"] += 1
        rig.reset()
        try:
            raw = rig.client.call_raw(context(kind), "explain", request_spec=spec)
        except Forbidden as exc:
            assert kind != "admin"
            assert exc.message == "forbidden: explain requires an admin context"
        except InvalidRequest as exc:
            assert kind == "admin" and exc.message.startswith("invalid request: ")
        else:
            assert kind == "admin"
            report = ExplainReport.from_primitive(raw)
            assert report.num_instances == parsed(spec).num_instances  # type: ignore[union-attr]
        assert rig.store.list_consumers() == [], "explain never claims"
        assert rig.oslo_errors.records == []

    case()
    assert TRIED["explain"] >= CASES["explain"]


def test_the_worker_still_serves_after_every_case(rig: Rig) -> None:
    assert_still_serves(rig, PROPERTIES)
