"""The dashboard's JSON: flavors that still fit, groups, the counters read from
/metrics and their rates; the server's token; where the metrics are read."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler.dashboard import command
from scheduler.dashboard.server import make_server, serve_in_background
from scheduler.dashboard.state import (
    NO_AGGREGATE,
    NO_ENDPOINT,
    REFUSALS_SHOWN,
    HostRow,
    Scraper,
    StateSource,
    cloud,
    flavor_fits,
    flavor_resources,
    groups,
    read_counters,
)
from scheduler.exceptions import StoreUnavailable
from scheduler.objects import ACTIVE, BUILDING, AllocationRequest, Flavor, InstanceRecord
from scheduler.store import Eviction, MemoryStore, Victim
from scheduler.store.records import Refusal
from tests.unit.factories import NOW, aggregate, az, host, populate, private_conf, uuid_of


def row(
    name: str,
    up: bool = True,
    disabled: bool = False,
    aggregates: tuple[str, ...] = (),
    **usage: tuple[int, int],
) -> HostRow:
    """A host as ``hosts --json`` prints it (what the page's rows are)."""
    return {
        "host": name,
        "uuid": name,
        "up": up,
        "disabled": disabled,
        "disabled_reason": None,
        "failed_builds": 0,
        "consumers": 0,
        "last_seen": None,
        "usage": {rc: {"used": used, "capacity": cap} for rc, (used, cap) in usage.items()},
        "traits": [],
        "aggregates": list(aggregates),
    }


@dataclass(frozen=True)
class FitCase:
    name: str
    rows: tuple[HostRow, ...]
    fits: tuple[int, int]  # instances, hosts


NEEDS = {"VCPU": 2, "MEMORY_MB": 1024}
FIT_CASES = [
    FitCase("fewest-over-the-classes", (row("a", VCPU=(0, 8), MEMORY_MB=(0, 2048)),), (2, 1)),
    FitCase("usage-counts", (row("a", VCPU=(4, 8), MEMORY_MB=(0, 8192)),), (2, 1)),
    FitCase("full-host", (row("a", VCPU=(7, 8), MEMORY_MB=(0, 8192)),), (0, 0)),
    FitCase("down-host", (row("a", up=False, VCPU=(0, 8), MEMORY_MB=(0, 8192)),), (0, 0)),
    FitCase("disabled-host", (row("a", disabled=True, VCPU=(0, 8), MEMORY_MB=(0, 8192)),), (0, 0)),
    FitCase("class-missing", (row("a", VCPU=(0, 8)),), (0, 0)),
    FitCase(
        "summed-over-hosts",
        (row("a", VCPU=(0, 8), MEMORY_MB=(0, 8192)), row("b", VCPU=(0, 4), MEMORY_MB=(0, 1024))),
        (5, 2),
    ),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
def test_flavor_fits(case: FitCase) -> None:
    assert flavor_fits(NEEDS, case.rows) == case.fits


def test_a_flavors_resources_are_the_schedulers_with_its_overrides() -> None:
    flavor = Flavor(
        name="f",
        vcpus=2,
        memory_mb=1024,
        root_gb=10,
        ephemeral_gb=5,
        extra_specs={"resources:VCPU": "0", "resources:CUSTOM_FPGA": "1"},
    )
    assert flavor_resources(flavor) == {"MEMORY_MB": 1024, "DISK_GB": 15, "CUSTOM_FPGA": 1}


def test_groups_by_aggregate_with_its_zone_and_hosts_in_none() -> None:
    rows = [
        row("a", aggregates=("az1-agg", "gold")),
        row("b", aggregates=("az1-agg",)),
        row("c"),
    ]
    assert groups(rows, {"az1-agg": "az1"}) == [
        {"name": "az1-agg", "zone": "az1", "hosts": ["a", "b"]},
        {"name": "gold", "zone": None, "hosts": ["a"]},
        {"name": NO_AGGREGATE, "zone": None, "hosts": ["c"]},
    ]


def test_the_cloud_is_the_hosts_commands_rows() -> None:
    store = MemoryStore()
    zone = az("zone-agg", "az1")
    populate(
        store,
        [host("h1", vcpus=8, ram=4096, aggregates=[zone.uuid]), host("h2", up=False)],
        [zone, aggregate("other")],
    )
    catalog = {"tiny": Flavor(name="tiny", vcpus=1, memory_mb=512, root_gb=1)}
    state = cloud(store, 60.0, catalog, NOW)
    assert [h["host"] for h in state["hosts"]] == ["h1", "h2"]
    assert state["groups"][0] == {"name": "zone-agg", "zone": "az1", "hosts": ["h1"]}
    assert state["summary"]["up"] == 1 and state["summary"]["down"] == 1
    assert state["summary"]["usage"]["VCPU"] == {"used": 0, "capacity": 8 + 16}
    (tiny,) = state["flavors"]
    assert (tiny["fits"], tiny["hosts"]) == (8, 1)  # h1's VCPU; h2 is down
    assert state["refusals"] == []
    assert (state["pending"], state["preemptions"]) == (0, [])


def test_the_page_lists_the_last_no_valid_hosts_as_refusals_prints_them() -> None:
    store = MemoryStore()
    for n in range(REFUSALS_SHOWN + 2):
        store.record_refusal(
            Refusal(1_700_000_000.0 + n, f"req-{n}", "run_instance", ("i-1", "i-2"), {"x": 2})
        )
    listed = cloud(store, 60.0, {}, NOW)["refusals"]
    assert len(listed) == REFUSALS_SHOWN
    assert listed[0] == {
        "time": "2023-11-14 22:13:31",
        "request_id": f"req-{REFUSALS_SHOWN + 1}",
        "action": "run_instance",
        "instance_uuids": ["i-1", "i-2"],
        "reasons": "2 x",
    }


def test_the_page_counts_the_pending_requests_and_lists_the_last_preemptions() -> None:
    store = MemoryStore()
    populate(store, [host("h1", vcpus=4)])
    store.add_pending("waits-1", 10, NOW)
    store.add_pending("waits-2", 0, NOW)
    store.create_instances(
        [
            InstanceRecord(
                uuid="spot-1",
                state=ACTIVE,
                task_state=None,
                host="h1",
                priority_class="spot",
                priority=10,
                preemptible=True,
            ),
            InstanceRecord(uuid="boot-1", state=BUILDING),
        ]
    )
    rp = uuid_of("h1")
    store.claim("spot-1", AllocationRequest({rp: {"VCPU": 4}}, "p", "u"))
    victim = Victim(
        "spot-1", {rp: {"VCPU": 4}}, "h1", store.get_instance("spot-1").updated_at, "spot", 10
    )
    eviction = Eviction("req-9", 1_700_000_000.0, "h1", "h1", None, "gold", 1000)
    request = AllocationRequest({rp: {"VCPU": 4}}, "p", "u")
    assert store.claim_preempting("boot-1", request, [victim], 1000, eviction=eviction)
    state = cloud(store, 60.0, {}, NOW)
    assert state["pending"] == 2
    assert state["preemptions"] == [
        {
            "time": "2023-11-14 22:13:20",
            "instance_uuid": "boot-1",
            "host": "h1",
            "priority_class": "gold",
            "priority": 1000,
            "victims": [{"uuid": "spot-1", "priority_class": "spot", "priority": 10}],
        }
    ]


PREEMPTING = """\
# TYPE scheduler_preemptions_total counter
scheduler_preemptions_total %(preempted)s
# TYPE scheduler_preemption_victims_total counter
scheduler_preemption_victims_total{priority_class="spot"} %(spot)s
scheduler_preemption_victims_total{priority_class="-"} 1.0
"""
WAITING = """\
# TYPE conductor_pending_wait_seconds histogram
conductor_pending_wait_seconds_bucket{le="+Inf",outcome="placed"} 2.0
conductor_pending_wait_seconds_count{outcome="placed"} 2.0
conductor_pending_wait_seconds_sum{outcome="placed"} 30.0
conductor_pending_wait_seconds_bucket{le="+Inf",outcome="timed_out"} 1.0
conductor_pending_wait_seconds_count{outcome="timed_out"} 1.0
conductor_pending_wait_seconds_sum{outcome="timed_out"} 600.0
"""


def test_the_preemptions_and_the_waits_for_capacity_are_read_from_the_metrics() -> None:
    now = [0.0]
    texts = {"w": PREEMPTING % {"preempted": 2, "spot": 3}, "c": WAITING}
    scraper = Scraper(["w", "c"], clock=lambda: now[0], fetch=lambda url, t: texts[url])
    first = scraper.scrape()["totals"]
    assert first["preemptions"] == 2
    assert first["preemption_victims"] == {"spot": 3, "-": 1}
    # Every outcome's waits together: 3 ended, 630 s in all.
    assert first["pending_wait_seconds"] == {"sum": 630.0, "count": 3.0}
    now[0], texts["w"] = 5.0, PREEMPTING % {"preempted": 5, "spot": 7}
    recent = scraper.scrape()["recent"]
    assert (recent["preemptions"], recent["preemption_victims"]) == (3, {"spot": 4})


WORKER = """\
# TYPE scheduler_decisions_total counter
scheduler_decisions_total{outcome="placed"} %(placed)s
scheduler_decisions_total{outcome="no_valid_host"} 1.0
# TYPE scheduler_no_valid_host_reasons_total counter
scheduler_no_valid_host_reasons_total{reason="insufficient VCPU"} %(vcpu)s
# TYPE scheduler_claim_conflicts_total counter
scheduler_claim_conflicts_total 3.0
# TYPE scheduler_decision_seconds histogram
scheduler_decision_seconds_bucket{le="+Inf"} %(count)s
scheduler_decision_seconds_count %(count)s
scheduler_decision_seconds_sum %(spent)s
"""
CONDUCTOR = """\
# TYPE conductor_reschedules_total counter
conductor_reschedules_total{kind="build"} 2.0
"""


def test_the_counters_of_two_endpoints_are_summed_and_made_rates() -> None:
    now = [0.0]
    texts = {
        "w1": WORKER % {"placed": 10, "vcpu": 1, "count": 11, "spent": 0.011},
        "w2": WORKER % {"placed": 5, "vcpu": 0, "count": 6, "spent": 0.006},
        "c": CONDUCTOR,
    }

    def fetch(url: str, timeout: float) -> str:
        if url == "down":
            raise OSError("connection refused")
        return texts[url]

    scraper = Scraper(["w1", "w2", "c", "down"], clock=lambda: now[0], fetch=fetch)
    first = scraper.scrape()
    assert first["totals"]["decisions"] == {"placed": 15, "no_valid_host": 2}
    assert first["totals"]["claim_conflicts"] == 6
    assert first["totals"]["reschedules"] == {"build": 2}
    assert [e["up"] for e in first["endpoints"]] == [True, True, True, False]
    assert first["rates"]["decisions_per_second"] == 0.0  # one sample: no rate yet

    now[0] = 5.0
    texts["w1"] = WORKER % {"placed": 60, "vcpu": 3, "count": 61, "spent": 0.111}
    second = scraper.scrape()
    assert second["rates"]["decisions_per_second"] == 10.0  # 50 more in 5 s
    assert second["rates"]["decision_ms"] == 2.0  # 0.1 s over 50 decisions
    assert second["recent"]["no_valid_host_reasons"] == {"insufficient VCPU": 2}
    assert second["recent"]["seconds"] == 5.0


def test_the_page_says_when_no_endpoint_measures_the_decisions() -> None:
    """With no endpoint configured the page said "0/0, all answering" and 0
    decisions; now it says the figures are not measured and how to set one."""
    assert Scraper([]).scrape()["unmeasured"] == NO_ENDPOINT
    assert "[scheduler] health_port" in NO_ENDPOINT

    def refused(url: str, timeout: float) -> str:
        raise OSError("connection refused")

    assert "2 configured" in Scraper(["a", "b"], fetch=refused).scrape()["unmeasured"]
    assert Scraper(["w"], fetch=lambda url, timeout: CONDUCTOR).scrape()["unmeasured"] is None


RECONCILER = """\
# TYPE conductor_reconcile_actions_total counter
conductor_reconcile_actions_total{kind="lost_vm"} %(acted)s
# TYPE conductor_reconcile_findings gauge
conductor_reconcile_findings{kind="overcommit"} %(over)s
conductor_reconcile_findings{kind="lost_vm"} 0.0
"""


def test_the_reconcilers_findings_are_merged_by_their_largest_and_repairs_summed() -> None:
    texts = {
        "c1": RECONCILER % {"acted": 2, "over": 1},
        "c2": RECONCILER % {"acted": 1, "over": 1},
    }
    scraper = Scraper(["c1", "c2"], fetch=lambda url, t: texts[url])
    totals = scraper.scrape()["totals"]
    # Two conductors see the same overcommit: one finding, not two.
    assert totals["reconcile_findings"] == {"overcommit": 1, "lost_vm": 0}
    assert totals["reconcile_actions"] == {"lost_vm": 3}


def test_a_worker_restart_counts_from_zero_not_negative() -> None:
    now = [0.0]
    text = [WORKER % {"placed": 100, "vcpu": 0, "count": 101, "spent": 0.1}]
    scraper = Scraper(["w"], clock=lambda: now[0], fetch=lambda url, t: text[0])
    scraper.scrape()
    now[0], text[0] = 2.0, WORKER % {"placed": 4, "vcpu": 0, "count": 5, "spent": 0.005}
    assert scraper.scrape()["rates"]["decisions_per_second"] == 2.5  # (4 + 1) in 2 s


def test_read_counters_of_an_empty_exposition() -> None:
    counters = read_counters("")
    assert counters["decisions"] == {} and counters["claim_conflicts"] == 0
    assert counters["decision_seconds"] == {"sum": 0.0, "count": 0.0}


@pytest.fixture
def server() -> Iterator[str]:
    source = StateSource(lambda: {"hosts": []}, Scraper([]))
    srv = make_server(source, "s3cret", "127.0.0.1", 0)
    serve_in_background(srv)
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.parametrize(
    ("token", "code"), [(None, 401), ("wrong", 401), ("s3cret", 200)], ids=str
)
def test_the_state_needs_the_token(server: str, token: str | None, code: int) -> None:
    status, body = get(f"{server}/api/state", token)
    assert status == code
    if code == 200:
        state: dict[str, Any] = json.loads(body)
        assert state["hosts"] == [] and "metrics" in state


def test_the_page_is_served_without_a_token_and_holds_none(server: str) -> None:
    status, body = get(f"{server}/")
    assert status == 200 and b"/api/state" in body and b"s3cret" not in body
    assert get(f"{server}/nothing")[0] == 404


def test_the_metrics_are_read_where_the_configuration_serves_them(tmp_path: Path) -> None:
    conf_file = tmp_path / "s.conf"
    conf_file.write_text(
        "[scheduler]\nworkers = 2\nhealth_port = 9000\nhealth_listen = 0.0.0.0\n"
        "[conductor]\nhealth_port = 9100\n"
    )
    conf = private_conf([str(conf_file)])
    assert command.metrics_urls(conf) == [
        "http://127.0.0.1:9000/metrics",
        "http://127.0.0.1:9001/metrics",
        "http://127.0.0.1:9100/metrics",
    ]
    assert command.metrics_urls(private_conf()) == []


def test_a_store_away_is_a_503_the_page_can_show() -> None:
    def away() -> dict[str, Any]:
        raise StoreUnavailable(reason="Error 111 connecting to 127.0.0.1:6390")

    srv = make_server(StateSource(away, Scraper([])), "t", "127.0.0.1", 0)
    serve_in_background(srv)
    try:
        status, body = get(f"http://127.0.0.1:{srv.server_address[1]}/api/state", "t")
    finally:
        srv.shutdown()
        srv.server_close()
    assert status == 503
    assert json.loads(body) == {
        "error": "StoreUnavailable: the store cannot be reached: "
        "Error 111 connecting to 127.0.0.1:6390"
    }
