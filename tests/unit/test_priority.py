"""Priority classes: the entries of ``[priority] classes``, the class a
request's flavor chooses, and what an instance's record keeps of it."""

from __future__ import annotations

import pytest

from scheduler.exceptions import InvalidRequest
from scheduler.priority import (
    CLASS_SPEC,
    NEVER,
    PREEMPT,
    PriorityClass,
    PriorityClasses,
    max_wait,
    record_fields,
)


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        pytest.param("on-demand:1000", PriorityClass("on-demand", 1000), id="plain"),
        pytest.param(
            " spot:10:preemptible ", PriorityClass("spot", 10, preemptible=True), id="preemptible"
        ),
        pytest.param(
            "batch:500:preemptible:never",
            PriorityClass("batch", 500, preemptible=True, preemption_policy=NEVER),
            id="preemptible-never",
        ),
        pytest.param(
            "infra:2000:never", PriorityClass("infra", 2000, preemption_policy=NEVER), id="never"
        ),
        pytest.param("low:-5", PriorityClass("low", -5), id="negative"),
        pytest.param(
            "batch:50:wait:preemptible",
            PriorityClass("batch", 50, preemptible=True, wait=True),
            id="wait",
        ),
        pytest.param("b.1_x:+7", PriorityClass("b.1_x", 7), id="signed"),
    ],
)
def test_an_entry_gives_its_class(entry: str, parsed: PriorityClass) -> None:
    assert PriorityClass.parse(entry) == parsed


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        pytest.param("spot", "the priority '' is not an integer", id="no-priority"),
        pytest.param("spot:high", "the priority 'high' is not an integer", id="not-a-number"),
        pytest.param("spot:1.5", "the priority '1.5' is not an integer", id="fraction"),
        pytest.param(":10", "the name must be", id="no-name"),
        pytest.param("sp ot:10", "the name must be", id="space-in-name"),
        pytest.param("spot:2000000000", "must be from -1000000000", id="too-high"),
        pytest.param(
            "spot:10:evictable", "only 'preemptible', 'never' and 'wait'", id="unknown-flag"
        ),
        pytest.param("spot:10:preemptible:preemptible", "each once", id="flag-twice"),
        pytest.param("spot:10:", "'never' and 'wait' may", id="empty-flag"),
    ],
)
def test_a_bad_entry_is_named_with_what_is_wrong(entry: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        PriorityClass.parse(entry)
    assert str(caught.value).startswith(repr(entry)) and problem in str(caught.value)


def test_every_bad_entry_is_named_in_one_line() -> None:
    with pytest.raises(ValueError) as caught:
        PriorityClasses.parse(["a:1", "b:x", "a:2", "c:1:maybe"])
    text = str(caught.value)
    assert "\n" not in text
    assert [part.split(":")[0] for part in text.split("; ")] == ["'b", "'a", "'c"]
    assert "class 'a' is defined twice" in text


def test_the_default_must_be_one_of_the_classes() -> None:
    with pytest.raises(ValueError, match="the default class 'gold' is not one of the classes"):
        PriorityClasses.parse(["spot:10:preemptible"], "gold")
    assert PriorityClasses.parse([], "").default is None  # unset, as oslo.config gives it


CLASSES = PriorityClasses.parse(["standard:100", "spot:10:preemptible"], "standard")


@pytest.mark.parametrize(
    ("classes", "extra_specs", "chosen"),
    [
        pytest.param(CLASSES, {CLASS_SPEC: "spot"}, "spot", id="named"),
        pytest.param(CLASSES, {CLASS_SPEC: " spot "}, "spot", id="named-with-blanks"),
        pytest.param(CLASSES, {}, "standard", id="the-default"),
        pytest.param(PriorityClasses.parse(["spot:10"]), {}, None, id="no-default-no-class"),
        pytest.param(PriorityClasses(), {"hw:cpu_policy": "dedicated"}, None, id="no-classes"),
    ],
)
def test_a_flavor_chooses_its_class(
    classes: PriorityClasses, extra_specs: dict[str, str], chosen: str | None
) -> None:
    found = classes.of(extra_specs)
    assert (found.name if found else None) == chosen


@pytest.mark.parametrize("classes", [CLASSES, PriorityClasses()], ids=["defined", "none"])
def test_an_unknown_class_is_one_clear_refusal(classes: PriorityClasses) -> None:
    with pytest.raises(InvalidRequest) as caught:
        classes.of({CLASS_SPEC: "gold"})
    assert caught.value.message.endswith(
        "flavor.extra_specs 'sched:priority_class' = 'gold': no such priority class is defined"
    )
    assert "standard" not in caught.value.message, "a user must not learn the cloud's classes"


def test_the_record_keeps_the_class_as_it_is_now() -> None:
    assert record_fields(CLASSES.classes["spot"]) == {
        "priority_class": "spot",
        "priority": 10,
        "preemptible": True,
    }
    assert record_fields(None) == {"priority_class": None, "priority": 0, "preemptible": False}


def test_a_class_reads_as_the_commands_print_it() -> None:
    assert str(PriorityClass("spot", 10, True)) == "spot (priority 10, preemptible)"
    assert (
        str(PriorityClass("infra", 2000, False, NEVER)) == "infra (priority 2000, never preempts)"
    )
    assert PriorityClass("x", 1).preemption_policy == PREEMPT


@pytest.mark.parametrize(
    ("wait", "asked", "limit", "expected"),
    [
        pytest.param(False, None, 600.0, None, id="class-fails-nothing-asked"),
        pytest.param(True, None, 600.0, 600.0, id="class-waits-nothing-asked"),
        pytest.param(True, False, 600.0, None, id="request-refuses-to-wait"),
        pytest.param(False, True, 600.0, 600.0, id="request-asks-to-wait"),
        pytest.param(True, True, 0.0, None, id="waiting-turned-off"),
    ],
)
def test_how_long_a_request_may_wait(
    wait: bool, asked: bool | None, limit: float, expected: float | None
) -> None:
    chosen = PriorityClass("c", 1, wait=wait)
    assert max_wait(chosen, asked, limit) == expected


def test_a_request_with_no_class_waits_only_when_it_asks() -> None:
    assert max_wait(None, None, 60.0) is None
    assert max_wait(None, True, 60.0) == 60.0
