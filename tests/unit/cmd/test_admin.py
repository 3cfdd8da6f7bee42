"""``scheduler-admin``: its arguments, and how it prints explain reports, hosts and
instances (tables of named cases; no services needed)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler import render, rpc, usage
from scheduler.cmd import _cli, _commands, admin, admin_explain, admin_hosts
from scheduler.exceptions import InvalidRequest, NotFound
from scheduler.explain import (
    CANDIDATE_STEP,
    HOST_FILTER,
    ExplainReport,
    InstanceExplanation,
    InstanceHosts,
    StageHosts,
    StageSurvivors,
    WeighedHostDetail,
    WeighedHostReport,
    WeigherShare,
)
from scheduler.flavors import load_catalog
from scheduler.objects import PENDING, AllocationRequest, InstanceRecord
from scheduler.priority import PriorityClass
from scheduler.store import InstanceReport, MemoryStore, RunningInstance
from scheduler.store.base import Aggregate, Inventory, Provider, Refusal, Service
from scheduler.store.columns import (
    CompactSnapshot,
    HostColumnsBuilder,
    ServiceColumnsBuilder,
)
from tests.unit.factories import host, populate, uuid_of

FILTERS = ("ComputeFilter", "AvailabilityZoneFilter")


def explanation(
    position: int,
    hosts: int,
    survivors: tuple[int, ...],
    reasons: dict[str, int],
    host: str | None,
    top: tuple[WeighedHostReport, ...] = (),
) -> InstanceExplanation:
    stages = [
        StageSurvivors("candidates", survivors[0]),
        *(StageSurvivors(f, n) for f, n in zip(FILTERS, survivors[1:], strict=True)),
    ]
    return InstanceExplanation(
        position=position, hosts=hosts, stages=tuple(stages), reasons=reasons, top=top, host=host
    )


def report(
    *instances: InstanceExplanation,
    placeable: bool,
    count: int | None = None,
    weighers: dict[str, float] | None = None,
) -> ExplainReport:
    return ExplainReport(
        request_id="req-1",
        flavor="m1.xlarge",
        resources={"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 160},
        num_instances=count or len(instances),
        placeable=placeable,
        instances=instances,
        weighers=weighers
        if weighers is not None
        else {"RAMWeigher": 1.0, "BuildFailureWeigher": 1e6},
    )


UNPLACEABLE = report(
    explanation(
        0,
        1200,
        (100, 0, 0),
        {"insufficient MEMORY_MB": 800, "missing trait HW_CPU_X86_AVX512F": 300, "disabled": 100},
        None,
    ),
    placeable=False,
)

UNPLACEABLE_TEXT = """\
explain req-1: flavor m1.xlarge x 1 (VCPU=8, MEMORY_MB=16384, DISK_GB=160)
dry run: nothing was claimed
result: NO VALID HOST (instance 1 of 1 found none; all or nothing, so none would be placed)
0/1200 hosts available: 800 insufficient MEMORY_MB, 300 missing trait HW_CPU_X86_AVX512F, \
100 disabled

instance 1 of 1: NO VALID HOST
  0/1200 hosts available: 800 insufficient MEMORY_MB, 300 missing trait HW_CPU_X86_AVX512F, \
100 disabled

  stage                   hosts left  removed
  (all hosts)                   1200
  candidates                     100     1100
  ComputeFilter                    0      100
  AvailabilityZoneFilter           0

  no host passed every stage: nothing was weighed"""

TOP = (
    WeighedHostReport("cmp-7", 1.75, {"RAMWeigher": 0.75, "BuildFailureWeigher": 1.0}),
    WeighedHostReport("cmp-2", 0.5, {"RAMWeigher": 0.5, "BuildFailureWeigher": 0.0}),
)
PLACEABLE = report(
    explanation(0, 10, (8, 8, 8), {"insufficient VCPU": 2}, "cmp-7", TOP), placeable=True
)

PLACEABLE_TEXT = """\
explain req-1: flavor m1.xlarge x 1 (VCPU=8, MEMORY_MB=16384, DISK_GB=160)
dry run: nothing was claimed
result: all 1 instance(s) would be placed
8/10 hosts available: 2 insufficient VCPU

instance 1 of 1: would go to cmp-7
  8/10 hosts available: 2 insufficient VCPU

  stage                   hosts left  removed
  (all hosts)                     10
  candidates                       8        2
  ComputeFilter                    8
  AvailabilityZoneFilter           8

  top weighed hosts (weight = the sum of each weigher's contribution):
  host   weight       w1       w2
  cmp-7  1.7500  +0.7500  +1.0000
  cmp-2  0.5000  +0.5000  +0.0000
  w1 = RAMWeigher x1
  w2 = BuildFailureWeigher x1,000,000"""

MANY = report(
    *(
        explanation(n, 4, (4 - n, 4 - n, 4 - n), {"insufficient MEMORY_MB": n}, f"cmp-{n}")
        for n in range(4)
    ),
    explanation(4, 4, (0, 0, 0), {"insufficient MEMORY_MB": 4}, None),
    placeable=False,
    count=6,
)


@pytest.mark.parametrize(
    "given, expected",
    [
        pytest.param(UNPLACEABLE, UNPLACEABLE_TEXT, id="unplaceable-counted-reasons"),
        pytest.param(PLACEABLE, PLACEABLE_TEXT, id="placeable-top-hosts-per-weigher"),
    ],
)
def test_format_explain_in_full(given: ExplainReport, expected: str) -> None:
    assert admin_explain.format_explain(given) == expected


@pytest.mark.parametrize(
    "given, present, absent",
    [
        pytest.param(
            MANY,
            [
                "result: NO VALID HOST (instance 5 of 6 found none; all or nothing, so none would "
                "be placed)",
                "0/4 hosts available: 4 insufficient MEMORY_MB",
                "instance 2 of 6: would go to cmp-1\n"
                "  3/4 hosts available: 1 insufficient MEMORY_MB"
                "\n\ninstance 3 of 6",
                "instance 5 of 6: NO VALID HOST",
            ],
            ["instance 6 of 6"],
            id="multi-instance-middle-condensed-stops-at-failure",
        ),
        pytest.param(
            report(explanation(0, 3, (3, 3, 3), {}, "cmp-0"), placeable=True, weighers={}),
            ["3/3 hosts available\n", "nothing was weighed"],
            ["top weighed hosts", "no host passed"],
            id="placed-without-weighing",
        ),
        pytest.param(
            report(
                explanation(
                    0,
                    3,
                    (1, 1, 1),
                    {"insufficient VCPU": 2},
                    "cmp-0",
                    (WeighedHostReport("cmp-0", 0.0, {}),),
                ),
                placeable=True,
            ),
            [
                "  host   weight\n  cmp-0  0.0000\n",
                "contributed nothing to these hosts: RAMWeigher x1, BuildFailureWeigher "
                "x1,000,000",
            ],
            ["w1"],
            id="one-host-left-has-no-contributions",
        ),
        pytest.param(
            report(explanation(0, 0, (0, 0, 0), {}, None), placeable=False),
            ["0/0 hosts available\n"],
            [],
            id="empty-cloud",
        ),
    ],
)
def test_format_explain_lines(given: ExplainReport, present: list[str], absent: list[str]) -> None:
    text = admin_explain.format_explain(given)
    for part in present:
        assert part in text
    for part in absent:
        assert part not in text


#: Every weigher the project ships, each moving the top hosts a little.
EVERY_WEIGHER = {
    name: float(n)
    for n, name in enumerate(
        sorted({e.name for e in importlib.metadata.entry_points(group="scheduler.weighers")}), 1
    )
}


def test_the_weighed_table_fits_100_columns_with_every_weigher() -> None:
    top = tuple(
        WeighedHostReport(
            f"compute-host-{n:04d}.example.org",
            1.0 - n / 10,
            {w: (n + 1) / (i + 7) for i, w in enumerate(EVERY_WEIGHER)},
        )
        for n in range(3)
    )
    given = report(
        explanation(0, 10, (8, 8, 8), {}, top[0].host, top), placeable=True, weighers=EVERY_WEIGHER
    )
    lines = admin_explain.format_explain(given).splitlines()
    assert max(map(len, lines)) <= admin_explain.WIDTH, max(lines, key=len)
    # Cut into several tables, each repeating the host and weight; every weigher
    # has its column, named once in the legend with its multiplier.
    assert sum(line.split() == ["host", "weight"] + line.split()[2:] for line in lines) > 1
    for n, weigher in enumerate(EVERY_WEIGHER, 1):
        assert f"  w{n} = {weigher} x{EVERY_WEIGHER[weigher]:,.10g}" in lines
        assert any(f" w{n} " in f"{line} " for line in lines if line.startswith("  host "))


def test_wrap_words_breaks_at_spaces_within_the_width() -> None:
    text = "  " + " ".join(f"word{n}" for n in range(60))
    lines = admin_explain.wrap_words(text, indent="    ", width=40)
    assert all(len(line) <= 40 for line in lines) and len(lines) > 1
    assert lines[0].startswith("  word0 ") and lines[1].startswith("    word")
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())


ALL_HOSTS = replace(
    PLACEABLE,
    instances=(
        replace(
            PLACEABLE.instances[0],
            instance_uuid=uuid_of("i1"),
            detail=InstanceHosts(
                stages=(
                    StageHosts(
                        "candidates", CANDIDATE_STEP, ("h1", "h2"), {"h3": "insufficient VCPU"}
                    ),
                    StageHosts("RetryFilter", HOST_FILTER, ("h1", "h2"), skipped=True),
                ),
                weighed=(
                    WeighedHostDetail("h1", 1.0, {"RAMWeigher": WeigherShare(1.0, 1.0, 1.0)}),
                    WeighedHostDetail("h2", 0.5, {"RAMWeigher": WeigherShare(0.5, 1.0, 0.5)}),
                ),
            ),
        ),
    ),
)


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(UNPLACEABLE, id="unplaceable"),
        pytest.param(PLACEABLE, id="placeable"),
        pytest.param(MANY, id="multi-instance"),
        pytest.param(ALL_HOSTS, id="all-hosts"),
    ],
)
def test_explain_report_survives_json(given: ExplainReport) -> None:
    raw = json.loads(json.dumps(given.to_primitive()))
    assert ExplainReport.from_primitive(raw) == given
    assert raw["summary"] == given.summary


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(None, id="none"),
        pytest.param({"request_id": "r"}, id="missing-fields"),
        pytest.param(
            {**PLACEABLE.to_primitive(), "instances": [{"position": "x"}]}, id="bad-instance"
        ),
    ],
)
def test_a_malformed_report_is_refused_typed(raw: Any) -> None:
    with pytest.raises(InvalidRequest):
        ExplainReport.from_primitive(raw)


def test_a_report_from_a_worker_without_uuids_or_detail_still_reads() -> None:
    raw = PLACEABLE.to_primitive()
    for inst in raw["instances"]:
        del inst["instance_uuid"]
    assert ExplainReport.from_primitive(raw) == PLACEABLE


@pytest.mark.parametrize(
    "given, expected",
    [
        pytest.param(
            StageHosts(
                "ComputeFilter",
                HOST_FILTER,
                ("h1",),
                {"h3": "disabled", "h2": "disabled"},
            ),
            "ComputeFilter alone on 3 hosts: 2 removed, 1 kept\n"
            "\n"
            "  removed host  reason\n"
            "  h2            disabled\n"
            "  h3            disabled",
            id="removed",
        ),
        pytest.param(
            StageHosts("RetryFilter", HOST_FILTER, ("h1", "h2"), skipped=True),
            "RetryFilter alone on 2 hosts: the request gives it nothing to check; every host kept",
            id="skipped",
        ),
        pytest.param(
            StageHosts("ImagePropertiesFilter", HOST_FILTER, ("h1",)),
            "ImagePropertiesFilter alone on 1 hosts: 0 removed, 1 kept",
            id="nothing-removed",
        ),
    ],
)
def test_format_filter_run(given: StageHosts, expected: str) -> None:
    assert admin_explain.format_filter_run(given) == expected
    assert StageHosts.from_primitive(json.loads(json.dumps(given.to_primitive()))) == given


# --- arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param(
            "trait:HW_CPU_X86_AVX512F=required",
            ("trait:HW_CPU_X86_AVX512F", "required"),
            id="trait",
        ),
        pytest.param(
            "aggregate_instance_extra_specs:a=b=c",
            ("aggregate_instance_extra_specs:a", "b=c"),
            id="value-with-equals",
        ),
        pytest.param("hw:cpu_policy=", ("hw:cpu_policy", ""), id="empty-value"),
    ],
)
def test_key_value(text: str, expected: tuple[str, str]) -> None:
    assert _cli.key_value(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("no-equals", id="no-equals"),
        pytest.param("=value", id="no-key"),
    ],
)
def test_key_value_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _cli.key_value(text)


def args(**overrides: Any) -> SimpleNamespace:
    base = {
        "flavor": "m1.small",
        "count": 1,
        "availability_zone": None,
        "group_policy": None,
        "group_uuid": None,
        "extra_spec": [],
        "image_property": [],
        "boot_from_volume": False,
        "project_id": "admin",
        "user_id": "admin",
    }
    return SimpleNamespace(**{**base, **overrides})


GROUP = "5d4c1e4e-1d2b-4b0e-9f7b-0a1b2c3d4e5f"


@pytest.mark.parametrize(
    "given, check",
    [
        pytest.param(
            args(),
            lambda s: (
                (s.flavor.name, s.num_instances, s.group, s.image) == ("m1.small", 1, None, None)
            ),
            id="plain",
        ),
        pytest.param(
            args(extra_spec=[("trait:HW_CPU_X86_AVX512F", "required")], count=3),
            lambda s: (
                (dict(s.flavor.extra_specs), s.num_instances)
                == ({"trait:HW_CPU_X86_AVX512F": "required"}, 3)
            ),
            id="extra-spec",
        ),
        pytest.param(
            args(image_property=[("hw_architecture", "x86_64")]),
            lambda s: dict(s.image.properties) == {"hw_architecture": "x86_64"},
            id="image-property",
        ),
        pytest.param(
            args(group_policy="anti-affinity", group_uuid=GROUP),
            lambda s: (s.group.uuid, s.group.policy) == (GROUP, "anti-affinity"),
            id="existing-group",
        ),
        pytest.param(
            args(group_policy="affinity"), lambda s: s.group.policy == "affinity", id="new-group"
        ),
        pytest.param(
            args(availability_zone="az1", boot_from_volume=True),
            lambda s: (
                (s.availability_zone, s.is_bfv, "DISK_GB" in s.resources) == ("az1", True, False)
            ),
            id="zone-and-bfv",
        ),
    ],
)
def test_build_spec(given: SimpleNamespace, check: Any) -> None:
    assert check(admin_explain.build_spec(given, load_catalog()))


@pytest.mark.parametrize(
    "given, message",
    [
        pytest.param(args(flavor="m9.giant"), "unknown flavor 'm9.giant'", id="unknown-flavor"),
        pytest.param(
            args(group_uuid=GROUP),
            "--group-uuid needs --group-policy",
            id="group-uuid-without-policy",
        ),
        pytest.param(
            args(group_policy="anti-affinity", group_uuid="nope"),
            "group.uuid",
            id="bad-group-uuid",
        ),
    ],
)
def test_build_spec_refuses(given: SimpleNamespace, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        admin_explain.build_spec(given, load_catalog())


def explain_conf(**overrides: Any) -> SimpleNamespace:
    defaults = {
        "json": False,
        "all_hosts": False,
        "only_filter": None,
        "request_id": None,
        "instance_uuid": [],
        "from_instance": None,
    }
    command = args(**{**defaults, **overrides})
    return SimpleNamespace(command=command, conductor=SimpleNamespace(flavors_file=None))


@pytest.mark.parametrize(
    "given, message",
    [
        pytest.param(
            explain_conf(all_hosts=True),
            r"--all-hosts needs --json \(the summary is the readable form\)",
            id="all-hosts-without-json",
        ),
        pytest.param(
            explain_conf(count=2, instance_uuid=[uuid_of("i1")]),
            "instance_uuids has 1 entries but num_instances is 2",
            id="uuids-not-as-many-as-count",
        ),
        pytest.param(explain_conf(instance_uuid=["nope"]), "instance_uuids", id="not-a-uuid"),
        pytest.param(
            explain_conf(flavor=None), "give --flavor, or --from-instance UUID", id="no-request"
        ),
        pytest.param(
            explain_conf(from_instance=uuid_of("i1"), count=2),
            "--from-instance reads the request from the record: drop --flavor, --count",
            id="from-instance-and-a-request",
        ),
    ],
)
def test_explain_refuses_before_asking_a_worker(given: SimpleNamespace, message: str) -> None:
    # No transport is configured: reaching the RPC would fail otherwise.
    with pytest.raises(InvalidRequest, match=message):
        admin_explain.run(given)  # type: ignore[arg-type]


def explain_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scheduler-admin")
    admin._add_commands(parser.add_subparsers(dest="name"))
    return parser


def test_explain_help_says_what_all_hosts_and_only_filter_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        explain_parser().parse_args(["explain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--all-hosts With --json: every stage's surviving hosts by name" in text
    assert "Needs --json" in text
    assert "--only-filter FILTER Run this one host filter alone on every host" in text
    assert "--request-id" in text and "--instance-uuid" in text


def test_all_hosts_and_only_filter_exclude_each_other() -> None:
    parser = explain_parser()
    parsed = parser.parse_args(["explain", "--flavor", "m1.small", "--only-filter", "X"])
    assert (parsed.only_filter, parsed.all_hosts) == ("X", False)
    with pytest.raises(SystemExit):
        parser.parse_args(["explain", "--flavor", "m1.small", "--all-hosts", "--only-filter", "X"])


# --- hosts --------------------------------------------------------------------------

NOW = 1_000_000.0


def provider(name: str, used: dict[str, int] | None = None, **kwargs: Any) -> Provider:
    return replace(host(name).provider, usages=used or {}, **kwargs)


def service(name: str, age: float = 1.0, **kwargs: Any) -> Service:
    return Service(host=name, rpc_server="sim", last_seen=NOW - age, **kwargs)


CHILD = Provider(
    uuid=uuid_of("cmp-a-gpu"),
    name="cmp-a-gpu",
    parent_uuid=uuid_of("cmp-a"),
    root_uuid=uuid_of("cmp-a"),
    inventories={"CUSTOM_GPU": Inventory(total=4)},
    usages={"CUSTOM_GPU": 1},
    traits=frozenset({"CUSTOM_GPU_A100"}),
)


EMPTY = {"VCPU": "0/16", "MEMORY_MB": "0/32768", "DISK_GB": "0/1000"}


def host_table(
    providers: list[Provider], services: list[Service], aggregates: list[Aggregate] | None = None
) -> usage.HostTable:
    """The table ``hosts`` prints, from a compact snapshot of these records."""
    hosts, services_built = HostColumnsBuilder(), ServiceColumnsBuilder()
    for p in providers:
        if p.parent_uuid is None:
            hosts.add_provider(p)
    for s in services:
        services_built.add_service(s)
    snapshot = CompactSnapshot(
        cursor="0-0",
        hosts=hosts.build(),
        children=[p for p in providers if p.parent_uuid is not None],
        aggregates=aggregates or [],
        services=services_built.build(),
    )
    return usage.HostTable.from_snapshot(snapshot, NOW, 60.0)


@pytest.mark.parametrize(
    "providers, services, expected",
    [
        pytest.param(
            [provider("cmp-a", {"VCPU": 2, "MEMORY_MB": 4096}, consumers=2)],
            [service("cmp-a")],
            {
                "cmp-a": (
                    True,
                    False,
                    None,
                    0,
                    2,
                    {"VCPU": "2/16", "MEMORY_MB": "4096/32768", "DISK_GB": "0/1000"},
                )
            },
            id="up-and-used",
        ),
        pytest.param(
            [provider("cmp-b")],
            [service("cmp-b", age=3600)],
            {"cmp-b": (False, False, None, 0, 0, EMPTY)},
            id="down-by-heartbeat",
        ),
        pytest.param(
            [provider("cmp-c")],
            [],
            {"cmp-c": (False, False, None, 0, 0, EMPTY)},
            id="no-service-is-down",
        ),
        pytest.param(
            [provider("cmp-d")],
            [service("cmp-d", disabled=True, disabled_reason="maintenance", failed_builds=3)],
            {"cmp-d": (True, True, "maintenance", 3, 0, EMPTY)},
            id="disabled-failing",
        ),
        pytest.param(
            [provider("cmp-a"), CHILD],
            [service("cmp-a")],
            {"cmp-a": (True, False, None, 0, 0, {**EMPTY, "CUSTOM_GPU": "1/4"})},
            id="child-provider-counts-toward-its-host",
        ),
    ],
)
def test_host_rows(
    providers: list[Provider], services: list[Service], expected: dict[str, tuple[Any, ...]]
) -> None:
    hosts = host_table(providers, services)
    rows = [hosts.row(i) for i in hosts.select([])]
    got = {
        r["host"]: (
            r["up"],
            r["disabled"],
            r["disabled_reason"],
            r["failed_builds"],
            r["consumers"],
            {rc: f"{u['used']}/{u['capacity']}" for rc, u in r["usage"].items()},
        )
        for r in rows
    }
    assert got == expected


def test_host_rows_name_aggregates_and_fold_traits() -> None:
    hosts = host_table(
        [provider("cmp-a", aggregates=frozenset({uuid_of("agg")})), CHILD],
        [service("cmp-a")],
        [Aggregate(uuid_of("agg"), "az1-hosts")],
    )
    row = hosts.row(0)
    assert (row["aggregates"], row["traits"]) == (["az1-hosts"], ["CUSTOM_GPU_A100"])
    assert row["usage"]["CUSTOM_GPU"] == {"used": 1, "capacity": 4}
    assert row["last_seen"] == NOW - 1.0
    assert list(row) == [
        "host",
        "uuid",
        "up",
        "disabled",
        "disabled_reason",
        "failed_builds",
        "consumers",
        "last_seen",
        "usage",
        "traits",
        "aggregates",
    ]


HOSTS_TEXT = """\
host   state  status                  failed builds  consumers  VCPU used/cap  \
MEMORY_MB used/cap  DISK_GB used/cap  aggregates  traits
cmp-a  up     enabled                             0          1           2/16  \
        4096/32768            0/1000  ssd-hosts   -
cmp-b  DOWN   disabled (maintenance)              3          0           0/16  \
           0/32768            0/1000  -           CUSTOM_SSD,HW_CPU_X86_AVX2

2 hosts: 1 up, 1 down, 1 disabled; VCPU 2/32 (6.2%); MEMORY_MB 4096/65536 (6.2%); \
DISK_GB 0/2000 (0.0%)"""


@pytest.mark.parametrize(
    "hosts, expected",
    [
        pytest.param(
            host_table(
                [
                    provider(
                        "cmp-a",
                        {"VCPU": 2, "MEMORY_MB": 4096},
                        consumers=1,
                        aggregates=frozenset({uuid_of("agg")}),
                    ),
                    provider("cmp-b", traits=frozenset({"CUSTOM_SSD", "HW_CPU_X86_AVX2"})),
                ],
                [
                    service("cmp-a"),
                    service(
                        "cmp-b",
                        age=3600,
                        disabled=True,
                        disabled_reason="maintenance",
                        failed_builds=3,
                    ),
                ],
                [Aggregate(uuid_of("agg"), "ssd-hosts")],
            ),
            HOSTS_TEXT,
            id="two-hosts",
        ),
        pytest.param(host_table([], []), "no hosts", id="none"),
    ],
)
def test_format_hosts(hosts: usage.HostTable, expected: str) -> None:
    assert "\n".join(admin_hosts.format_hosts(hosts, hosts.select([]))) == expected


# --- instance show ------------------------------------------------------------------

ERRORED = InstanceRecord(
    uuid=uuid_of("i-error"),
    state="ERROR",
    task_state=None,
    attempts=0,
    fault="No valid host was found.",
    fault_details="0/4 hosts available: 4 insufficient MEMORY_MB",
    request_spec={"flavor": {"name": "m1.xlarge"}},
    updated_at=0.0,
)
RETRIED = InstanceRecord(
    uuid=uuid_of("i-retried"),
    state="ERROR",
    task_state=None,
    attempts=3,
    tried_hosts=("cmp-a", "cmp-b", "cmp-c"),
    fault="Exceeded maximum number of retries.",
    fault_details="max retries exceeded; hosts tried: cmp-a, cmp-b, cmp-c; last failure: boom",
)
ACTIVE = InstanceRecord(
    uuid=uuid_of("i-active"),
    state="ACTIVE",
    task_state=None,
    host="cmp-a",
    node="cmp-a",
    attempts=1,
)
RESIZED = InstanceRecord(
    uuid=uuid_of("i-resized"),
    state="RESIZED",
    task_state=None,
    host="cmp-b",
    node="cmp-b",
    attempts=1,
    redrives=1,
    migration_uuid=uuid_of("migration"),
    source_host="cmp-a",
    new_flavor={"name": "m1.large"},
    request_spec={"flavor": {"name": "m1.small"}},
)


@pytest.mark.parametrize(
    "record, allocations, expected",
    [
        pytest.param(
            ERRORED,
            {},
            [
                "  state          ERROR (task: -)",
                "  flavor         m1.xlarge",
                "  fault          No valid host was found.",
                "  fault details  0/4 hosts available: 4 insufficient MEMORY_MB   [admin only]",
                "  allocations    -",
            ],
            id="no-valid-host",
        ),
        pytest.param(
            RETRIED,
            {},
            [
                "  attempts       3",
                "  tried hosts    cmp-a, cmp-b, cmp-c",
                "  fault          Exceeded maximum number of retries.",
                "  fault details  max retries exceeded; hosts tried: cmp-a, cmp-b, cmp-c; last "
                "failure: boom   [admin only]",
            ],
            id="max-retries",
        ),
        pytest.param(
            ACTIVE,
            {"cmp-a": {"VCPU": 1, "MEMORY_MB": 2048}},
            [
                "  host           cmp-a (node cmp-a)",
                "  allocations    cmp-a: VCPU=1, MEMORY_MB=2048",
                "  fault          -",
                "  fault details  -",
                "  re-drives      0",
            ],
            id="active",
        ),
        pytest.param(
            RESIZED,
            {"cmp-b": {"VCPU": 4}},
            [
                # It runs on cmp-b with the new flavor (Nova's VERIFY_RESIZE shows
                # it so); the old flavor was shown with the new host before.
                "  flavor         m1.large",
                "  allocations    cmp-b: VCPU=4",
                f"  resize         to m1.large from cmp-a; migration {uuid_of('migration')} holds "
                "cmp-a: VCPU=1",
                "  re-drives      1",
            ],
            id="resized",
        ),
    ],
)
def test_format_instance(
    record: InstanceRecord, allocations: dict[str, dict[str, int]], expected: list[str]
) -> None:
    text = render.format_instance(
        render.instance_view(record, allocations, {"cmp-a": {"VCPU": 1}})
    )
    lines = text.splitlines()
    assert lines[0] == f"instance {record.uuid}"
    for line in expected:
        assert line in lines


def test_instance_view_is_json_and_leaves_out_the_request_spec() -> None:
    view = json.loads(json.dumps(render.instance_view(ERRORED, {})))
    assert view["fault"] == "No valid host was found."
    assert view["fault_details"] == "0/4 hosts available: 4 insufficient MEMORY_MB"
    assert "request_spec" not in view and view["flavor"] == "m1.xlarge"


# --- host disable / enable ----------------------------------------------------------


def host_command(
    store: MemoryStore, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[str, Service]:
    """Run ``scheduler-admin host ARGV`` on ``store``; what it printed and the
    service after."""
    command = explain_parser().parse_args(["host", *argv])
    result = admin._host_set(SimpleNamespace(command=command), store)  # type: ignore[arg-type]
    assert _commands.emit(result, _commands.fmt_of(command)) == 0
    service = store.get_service(command.hostname)
    assert service is not None
    return capsys.readouterr().out.strip(), service


@pytest.fixture
def one_host() -> MemoryStore:
    store = MemoryStore()
    populate(store, [host("cmp-a")])
    return store


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                (
                    ("disable", "cmp-a", "--reason", "maintenance"),
                    "host cmp-a disabled (maintenance)",
                ),
                (("enable", "cmp-a"), "host cmp-a enabled"),
            ],
            id="disable-then-enable",
        ),
        pytest.param(
            [
                (("disable", "cmp-a"), "host cmp-a disabled"),
                (("disable", "cmp-a", "--reason", "disk"), "host cmp-a disabled (disk)"),
                (("disable", "cmp-a", "--reason", "psu"), "host cmp-a disabled (psu)"),
            ],
            id="disabling-again-replaces-the-reason",
        ),
        pytest.param(
            [
                (("disable", "cmp-a", "--reason", "disk"), "host cmp-a disabled (disk)"),
                (("disable", "cmp-a"), "host cmp-a already disabled (disk)"),
                (("disable", "cmp-a", "--reason", "disk"), "host cmp-a already disabled (disk)"),
            ],
            id="disabling-again-without-a-new-reason-is-a-no-op",
        ),
        pytest.param(
            [(("enable", "cmp-a"), "host cmp-a already enabled")], id="enabling-an-enabled-host"
        ),
    ],
)
def test_host_disable_and_enable(
    one_host: MemoryStore,
    capsys: pytest.CaptureFixture[str],
    steps: list[tuple[tuple[str, ...], str]],
) -> None:
    root = one_host.get_provider_by_name("cmp-a")
    for argv, printed in steps:
        before = one_host.compact_snapshot().cursor
        out, service = host_command(one_host, capsys, *argv)
        assert out == printed
        # The service flag and the status trait agree after every step.
        traits = one_host.get_provider(root.uuid).traits
        assert ("COMPUTE_STATUS_DISABLED" in traits) == service.disabled
        if "already" in printed:
            assert one_host.changes(before) == []  # nothing written, nothing fed
        else:
            assert {c.kind for c in one_host.changes(before)} >= {"service"}
        if argv[0] == "enable":
            assert (service.disabled, service.disabled_reason) == (False, None)


def test_host_disable_json_says_the_state_and_whether_it_changed(
    one_host: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = host_command(one_host, capsys, "disable", "cmp-a", "--reason", "rack 4", "--json")
    assert json.loads(out) == {
        "host": "cmp-a",
        "disabled": True,
        "disabled_reason": "rack 4",
        "changed": True,
    }
    out, _ = host_command(one_host, capsys, "enable", "cmp-a", "--json")
    assert json.loads(out)["disabled"] is False


def test_host_disable_leaves_the_instances_running_there_alone(
    one_host: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    root = one_host.get_provider_by_name("cmp-a")
    consumer = uuid_of("running")
    one_host.claim(
        consumer,
        AllocationRequest(allocations={root.uuid: {"VCPU": 2}}, project_id="p", user_id="u"),
    )
    host_command(one_host, capsys, "disable", "cmp-a")
    held = one_host.get_consumer(consumer)
    assert held is not None and dict(held.allocations) == {root.uuid: {"VCPU": 2}}
    assert one_host.get_provider(root.uuid).usages["VCPU"] == 2


@pytest.mark.parametrize("action", ["disable", "enable"])
def test_an_unknown_host_is_one_line_exit_2_and_nothing_changed(
    one_host: MemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    action: str,
) -> None:
    monkeypatch.setattr(admin, "make_store", lambda conf: one_host)
    cursor = one_host.compact_snapshot().cursor
    command = explain_parser().parse_args(["host", action, "cmp-zz"])
    command.name = "host"
    with pytest.raises(NotFound, match="host cmp-zz not found"):
        admin.run(SimpleNamespace(command=command))  # type: ignore[arg-type]
    assert one_host.changes(cursor) == []


@pytest.mark.parametrize(
    "argv, says",
    [
        pytest.param(
            ["host", "--help"], "Disable or enable one host's compute service", id="host"
        ),
        pytest.param(
            ["host", "disable", "--help"],
            "Disable HOST: no boot, reschedule or resize picks it from now on",
            id="disable",
        ),
        pytest.param(
            ["host", "enable", "--help"], "Enable HOST: it takes new instances again", id="enable"
        ),
    ],
)
def test_host_help_says_what_each_does(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit):
        explain_parser().parse_args(argv)
    assert says in " ".join(capsys.readouterr().out.split())


def test_instance_view_without_admin_leaves_the_admin_details_out() -> None:
    record = replace(RESIZED, availability_zone="az1", request_id="req-9")
    view = render.instance_view(
        record, {"cmp-b": {"VCPU": 4}}, {"cmp-a": {"VCPU": 1}}, admin=False
    )
    assert not set(render.ADMIN_FIELDS) & set(view)
    assert "allocations" not in view["resize"]
    lines = render.format_instance(view).splitlines()
    assert "  host        cmp-b" in lines
    assert "  zone        az1" in lines and "  request id  req-9" in lines
    assert f"  resize      to m1.large from cmp-a; migration {uuid_of('migration')}" in lines
    assert not any(word in line for line in lines for word in ("allocations", "tried", "node"))
    full = render.format_instance(render.instance_view(record, {}, {})).splitlines()
    assert "  zone           az1" in full and "  request id     req-9" in full


# --- audit --------------------------------------------------------------------------


def audit_conf(*argv: str) -> SimpleNamespace:
    command = explain_parser().parse_args(["audit", *argv])
    return SimpleNamespace(
        command=command,
        conductor=SimpleNamespace(
            reconcile_interval=1.0,
            orphan_grace=0.0,
            report_max_age=60.0,
            lost_vm_action="error",
            deleted_retention=60.0,
            resize_timeout=60.0,
        ),
        compute=SimpleNamespace(topic="compute"),
        upgrade_levels=SimpleNamespace(compute=None),
    )


class Transport:
    cleaned = False

    def cleanup(self) -> None:
        self.cleaned = True


@pytest.fixture
def fixable(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``audit --fix`` with no broker: the transport and compute client stand-ins."""
    reaped: list[tuple[str, str]] = []

    class Compute:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def reap_instance(self, ctxt: Any, host: str, uuid: str, reason: str) -> None:
            reaped.append((host, uuid))

    monkeypatch.setattr(rpc, "get_transport", lambda conf: Transport())
    monkeypatch.setattr(rpc, "ComputeClient", Compute)
    return reaped


def audited(conf: SimpleNamespace, store: MemoryStore) -> int:
    """``scheduler-admin audit`` on ``store``: printed as asked, its exit status."""
    result = admin.extension("audit")(conf, store)  # type: ignore[arg-type]
    return _commands.emit(result, _commands.fmt_of(conf.command))


def test_audit_prints_each_finding_and_the_counts_and_exits_1(
    one_host: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    orphan = uuid_of("orphan")
    root = one_host.get_provider_by_name("cmp-a").uuid
    one_host.claim(orphan, AllocationRequest({root: {"VCPU": 1}}, "p", "u"))
    assert audited(audit_conf(), one_host) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["orphan_allocation", orphan, "host=cmp-a"]
    assert "action=release (due)" in lines[0] and "no record holds it" in lines[0]
    assert lines[-1] == (
        "findings: stray_vm=0 lost_record=0 missing_allocation=0 orphan_allocation=1 lost_boot=0 "
        "lost_vm=0"
        " misplaced_vm=0 lost_delete=0 lost_shelve=0 lost_resize=0 overcommit=0"
        " stale_report=0 pending_unindexed=0 stale_pending=0"
    )
    assert one_host.get_consumer(orphan) is not None  # no --fix: nothing done


def test_audit_fix_repairs_then_finds_nothing(
    one_host: MemoryStore, capsys: pytest.CaptureFixture[str], fixable: list[tuple[str, str]]
) -> None:
    orphan, stray = uuid_of("orphan"), uuid_of("stray")
    root = one_host.get_provider_by_name("cmp-a").uuid
    one_host.claim(orphan, AllocationRequest({root: {"VCPU": 1}}, "p", "u"))
    one_host.create_instances([InstanceRecord(uuid=stray, state="ERROR", task_state=None)])
    one_host.report_instances(
        [InstanceReport("cmp-a", time.time() + 1, (RunningInstance(stray, {"VCPU": 1}),))]
    )
    assert audited(audit_conf("--fix", "--json"), one_host) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["repaired"] == {"orphan_allocation": 1, "stray_vm": 1}
    assert {(f["kind"], f["outcome"]) for f in out["findings"]} == {
        ("orphan_allocation", "released"),
        ("stray_vm", "reap cast"),
    }
    assert fixable == [("cmp-a", stray)]
    assert one_host.get_consumer(orphan) is None
    one_host.report_instances([InstanceReport("cmp-a", time.time() + 1, ())])  # reaped
    assert audited(audit_conf(), one_host) == 0
    assert capsys.readouterr().out.strip().startswith("findings: stray_vm=0")


def test_the_conductors_commands_are_found_by_entry_point() -> None:
    from conductor_stub import admin as conductor_admin

    assert admin.extension("host-drain") is conductor_admin.host_drain
    assert admin.extension("audit") is conductor_admin.audit
    with pytest.raises(admin.CommandNotInstalled, match="nope: no such command installed"):
        admin.extension("nope")


def test_audit_grace_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        audit_conf("--fix", "--grace", "-1")
    assert "--grace: must be at least 0, got -1" in capsys.readouterr().err


# --- hosts and usage, as commands ---------------------------------------------------


def admin_command(store: MemoryStore, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """``scheduler-admin ARGV`` in process on ``store`` (what main runs)."""
    monkeypatch.setattr(admin, "make_store", lambda conf: store)
    command = explain_parser().parse_args(list(argv))
    conf = SimpleNamespace(command=command, scheduler=SimpleNamespace(service_down_time=60))
    return admin.run(conf)  # type: ignore[arg-type]


@pytest.fixture
def three_hosts() -> MemoryStore:
    store = MemoryStore()
    populate(
        store,
        [host(f"cmp-{n}", aggregates=[uuid_of("ssd")] if n < 2 else []) for n in range(3)],
    )
    store.put_aggregate(Aggregate(uuid_of("ssd"), "ssd"))
    for n, ram in enumerate((4096, 8192)):
        store.claim(
            uuid_of(f"i{n}"),
            AllocationRequest({uuid_of(f"cmp-{n}"): {"MEMORY_MB": ram}}, f"p{n}", "u"),
        )
    return store


def test_hosts_filters_sorts_and_prints_json_a_host_a_line(
    three_hosts: MemoryStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["hosts", "--filter", "aggregate=ssd", "--sort", "used:MEMORY_MB", "--reverse"]
    assert admin_command(three_hosts, monkeypatch, *argv, "--json") == 0
    out = capsys.readouterr().out
    rows = json.loads(out)
    assert [r["host"] for r in rows] == ["cmp-1", "cmp-0"]
    assert len(out.splitlines()) == len(rows) + 2  # "[", a host a line, "]"
    assert admin_command(three_hosts, monkeypatch, *argv) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[-2:] == ["aggregates", "traits"]
    assert [line.split()[0] for line in text[1:3]] == ["cmp-1", "cmp-0"]
    assert text[-1].startswith("2 hosts: ")


def test_usage_views_as_commands(
    three_hosts: MemoryStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert admin_command(three_hosts, monkeypatch, "usage", "aggregate", "ssd") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "aggregate",
        "hosts",
        "resource",
        "class",
        "used",
        "capacity",
        "fill",
    ]
    assert lines[2].split()[-4:] == ["MEMORY_MB", "12288", "65536", "18.8%"]
    assert admin_command(three_hosts, monkeypatch, "usage", "project", "--json") == 0
    projects = json.loads(capsys.readouterr().out)["projects"]
    assert [(p["project_id"], p["usage"]) for p in projects] == [
        ("p0", {"MEMORY_MB": {"used": 4096}}),
        ("p1", {"MEMORY_MB": {"used": 8192}}),
    ]
    assert admin_command(three_hosts, monkeypatch, "usage", "provider", "cmp-1") == 0
    text = capsys.readouterr().out
    assert text.startswith(f"provider cmp-1 ({uuid_of('cmp-1')}); 1 consumer(s)")
    assert ["MEMORY_MB", "8192", "32768", "25.0%", "32768", "0", "1"] in [
        line.split() for line in text.splitlines()
    ]
    with pytest.raises(NotFound, match="aggregate gold not found"):
        admin_command(three_hosts, monkeypatch, "usage", "aggregate", "gold")


# --- refusals -----------------------------------------------------------------------


def refusals_command(store: MemoryStore, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    command = explain_parser().parse_args(["refusals", *argv])
    result = admin._refusals(SimpleNamespace(command=command), store)  # type: ignore[arg-type]
    assert _commands.emit(result, _commands.fmt_of(command)) == 0
    return capsys.readouterr().out


def test_refusals_shows_the_last_no_valid_hosts_newest_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    assert refusals_command(store, capsys).strip() == "no NoValidHost kept"
    for n, uuids in enumerate([("i-1",), ("i-2", "i-3", "i-4")]):
        store.record_refusal(
            Refusal(
                at=1_700_000_000.0 + n,
                request_id=f"req-{n}",
                action="run_instance",
                instance_uuids=uuids,
                reasons={"disabled": 1, "insufficient MEMORY_MB": 3 + n},
            )
        )
    lines = refusals_command(store, capsys).splitlines()
    assert lines[0].split()[:4] == ["time", "(UTC)", "request", "action"]
    assert lines[1].split() == [
        "2023-11-14", "22:13:21", "req-1", "run_instance", "i-2", "(+2)",
        "4", "insufficient", "MEMORY_MB,", "1", "disabled",
    ]  # fmt: skip
    assert lines[2].split()[2] == "req-0" and len(lines) == 3
    assert refusals_command(store, capsys, "--limit", "1", "-f", "value").splitlines() == [
        "2023-11-14 22:13:21 req-1 run_instance i-2,i-3,i-4"
    ]
    document = json.loads(refusals_command(store, capsys, "-f", "json"))
    assert [r["request_id"] for r in document["refusals"]] == ["req-1", "req-0"]
    assert document["refusals"][0]["reasons"] == {"disabled": 1, "insufficient MEMORY_MB": 4}


def test_format_explain_names_the_request_s_priority_class() -> None:
    """The class the worker resolved is the third line; a report without one
    (no class, or a worker older than classes) reads as it always did."""
    spot = PriorityClass("spot", 10, preemptible=True)
    with_class = replace(UNPLACEABLE, priority_class=spot)
    lines = admin_explain.format_explain(with_class).splitlines()
    assert lines[2] == "priority class: spot (priority 10, preemptible)"
    assert lines[:2] + lines[3:] == UNPLACEABLE_TEXT.splitlines()
    primitive = with_class.to_primitive()
    assert ExplainReport.from_primitive(primitive) == with_class
    del primitive["priority_class"]
    assert ExplainReport.from_primitive(primitive).priority_class is None


def test_explain_from_instance_reads_the_recorded_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    spec = admin_explain.build_spec(args(count=3), load_catalog())
    uuid = uuid_of("pending-one")
    store.create_instances(
        [
            InstanceRecord(
                uuid=uuid, state=PENDING, request_spec=spec.to_primitive(), request_id="req-7"
            )
        ]
    )
    monkeypatch.setattr(admin_explain, "make_store", lambda conf: store)
    given = explain_conf(flavor=None, from_instance=uuid).command
    found, uuids, request_id = admin_explain.recorded_request(None, given)  # type: ignore[arg-type]
    assert (found.flavor.name, found.num_instances) == ("m1.small", 1)
    assert (list(uuids or ()), request_id) == ([uuid], "req-7")
