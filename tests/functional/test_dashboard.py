"""``scheduler-admin dashboard`` against a running cluster, in a real headless
Chromium: the page's numbers equal ``scheduler-admin hosts --json``, ``usage
aggregate --json`` and the store's, it names the NoValidHost's reason and the
reschedule, it updates itself while instances boot, and its data needs the
token. A screenshot is
kept in the test's directory (and, with ``SCHEDULER_DASHBOARD_SCREENSHOT=PATH``
set, written there too: that is how ``doc/dashboard.png`` is made)."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.nodes import wait_until
from scheduler.dashboard.state import NO_ENDPOINT
from tests.fixtures.cli import admin_cli, boot_nowait
from tests.fixtures.metrics import metered, start_dashboard
from tests.functional.chromium import Browser
from tests.functional.conftest import Cluster

#: What the page shows, read from its DOM: every host's row of the hosts
#: table, the heat map's groups, the flavors, the NoValidHost reasons, the
#: reschedule and re-drive rows, the hosts down or disabled, the summary card.
READ_PAGE = """(() => {
  const text = (e) => e.textContent.trim();
  const rows = (sel) =>
    [...document.querySelectorAll(sel)].filter((r) => !r.querySelector('.empty'));
  const heads = [...document.querySelectorAll('#hosts thead th')].map(text);
  return {
    polls: Number(document.body.dataset.polls),
    hosts: Object.fromEntries(rows('#hosts tbody tr').map((r) => {
      const cells = [...r.cells].map(text);
      return [cells[0], Object.fromEntries(heads.map((h, i) => [h, cells[i]]))];
    })),
    groups: Object.fromEntries([...document.querySelectorAll('#heatmap .group')].map((g) =>
      [g.dataset.group, [...g.querySelectorAll('.cell')].map((c) => c.dataset.host)])),
    cells: Object.fromEntries([...document.querySelectorAll('#heatmap .cell')].map((c) =>
      [c.dataset.host, c.className])),
    flavors: Object.fromEntries(rows('#flavors tbody tr').map((r) =>
      [r.dataset.flavor, Number(r.querySelector('[data-fits]').dataset.fits)])),
    refusals: rows('#refusals tbody tr').map((r) => [...r.cells].map(text)),
    reasons: Object.fromEntries(rows('#nvh tbody tr').map((r) =>
      [r.dataset.reason, [...r.cells].slice(1).map(text)])),
    counters: rows('#retries tbody tr').map((r) => [...r.cells].map(text)),
    unwell: rows('#unwell tbody tr').map((r) => [...r.cells].slice(0, 3).map(text)),
    hostsCard: text(document.querySelector('[data-card="hosts"] .sub')),
  };
})()"""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "chromium")
    yield b
    b.close()


def hosts_json(cluster: Cluster) -> list[dict[str, Any]]:
    out = admin_cli(cluster, "hosts", "--json")
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def as_page_shows(rows: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``hosts --json`` as the page's hosts table should show it."""
    classes = sorted(
        {rc for r in rows for rc in r["usage"]},
        key=lambda rc: ({"VCPU": 0, "MEMORY_MB": 1, "DISK_GB": 2}.get(rc, 3), rc),
    )
    shown = {}
    for r in rows:
        status = "enabled"
        if r["disabled"]:
            status = "disabled" + (f" ({r['disabled_reason']})" if r["disabled_reason"] else "")
        shown[r["host"]] = {
            "host": r["host"],
            "state": "up" if r["up"] else "down",
            "status": status,
            "failed builds": str(r["failed_builds"]),
            "consumers": str(r["consumers"]),
            **{
                f"{rc} used/cap": (
                    f"{r['usage'][rc]['used']}/{r['usage'][rc]['capacity']}"
                    if rc in r["usage"]
                    else "-"
                )
                for rc in classes
            },
        }
    return shown


def store_usage(cluster: Cluster) -> dict[str, dict[str, str]]:
    """Per host, its providers' usage and capacity summed per class, from the store."""
    providers = cluster.store.list_providers()
    name_of = {p.uuid: p.name for p in providers if (p.root_uuid or p.uuid) == p.uuid}
    out: dict[str, dict[str, list[int]]] = {}
    for p in providers:
        host = name_of[p.root_uuid or p.uuid]
        for rc, inv in p.inventories.items():
            used, cap = out.setdefault(host, {}).setdefault(rc, [0, 0])
            out[host][rc] = [used + p.usages.get(rc, 0), cap + inv.capacity]
    return {
        host: {f"{rc} used/cap": f"{u}/{c}" for rc, (u, c) in usage.items()}
        for host, usage in out.items()
    }


def fits(rows: list[dict[str, Any]], needs: dict[str, int]) -> int:
    return sum(
        min((r["usage"][rc]["capacity"] - r["usage"][rc]["used"]) // n for rc, n in needs.items())
        for r in rows
        if r["up"] and not r["disabled"]
    )


def test_the_page_shows_the_cloud_as_hosts_json_does_and_follows_it_live(
    cluster: Cluster, browser: Browser, tmp_path: Path
) -> None:
    metered(cluster)  # and bad-0000, whose builds fail (a reschedule)
    cluster.start_compute(4, "--availability-zones", "az1,az2", name="rack")  # two zones
    cluster.start_worker().wait_for("health_endpoint")
    booted = boot_nowait(cluster, "--count", "3", "--flavor", "m1.medium")
    (refused,) = boot_nowait(cluster, "--count", "1", "--flavor", "m1.giant")
    wait_until(
        lambda: (
            {cluster.store.get_instance(u).state for u in booted} == {"ACTIVE"}
            and cluster.store.get_instance(refused).state == "ERROR"
        ),
        timeout=60,
        what="three instances ACTIVE and the giant in ERROR",
    )
    out = admin_cli(cluster, "host", "disable", "rack-0003", "--reason", "maintenance")
    assert out.returncode == 0, out.stderr

    dashboard, url = start_dashboard(cluster)
    try:
        # The data needs the token; the page itself does not hold it.
        base = url.split("#", 1)[0]
        with pytest.raises(urllib.error.HTTPError) as refused_call:
            urllib.request.urlopen(f"{base}api/state", timeout=10)
        assert refused_call.value.code == 401

        browser.open(url)
        browser.wait_for("document.body && Number(document.body.dataset.polls) >= 1")
        browser.evaluate("document.getElementById('all-hosts').open = true")
        polls = browser.evaluate(READ_PAGE)["polls"]
        browser.wait_for(f"Number(document.body.dataset.polls) > {polls}")
        page = browser.evaluate(READ_PAGE)
        rows = hosts_json(cluster)

        # The hosts, as hosts --json and the store have them.
        assert page["hosts"] == as_page_shows(rows)
        # The giant's NoValidHost among the last ones, with its reasons.
        (kept,) = [r for r in page["refusals"] if r[2] == refused]
        assert "insufficient MEMORY_MB" in kept[3], kept
        for host, usage in store_usage(cluster).items():
            assert {k: page["hosts"][host][k] for k in usage} == usage, host
        # Each aggregate's hosts, as the page shows them, add up to what
        # ``usage aggregate --json`` says (the hosts in none too).
        out = admin_cli(cluster, "usage", "aggregate", "--json")
        assert out.returncode == 0, out.stderr
        by_aggregate = json.loads(out.stdout)
        views = [(a["name"], a) for a in by_aggregate["aggregates"]]
        views.append(("(no aggregate)", by_aggregate["no_aggregate"]))
        for name, view in views:
            members = page["groups"].get(name, [])
            assert len(members) == view["hosts"], name
            for rc, usage in view["usage"].items():
                cells = [page["hosts"][h][f"{rc} used/cap"].split("/") for h in members]
                summed = [sum(int(c[i]) for c in cells if len(c) == 2) for i in (0, 1)]
                assert summed == [usage["used"], usage["capacity"]], (name, rc)
        assert page["hostsCard"] == "5 up, 0 down, 1 disabled"
        assert page["unwell"] == [["rack-0003", "up", "disabled (maintenance)"]]
        assert "disabled" in page["cells"]["rack-0003"]
        # Grouped by aggregate, each zone's hosts together.
        zones = {g: sorted(hosts) for g, hosts in page["groups"].items()}
        assert sorted(h for hosts in zones.values() for h in hosts) == sorted(
            r["host"] for r in rows
        )
        assert sorted(map(tuple, zones.values())) == [
            ("bad-0000",),
            ("rack-0000", "rack-0002"),
            ("rack-0001", "rack-0003"),
        ]
        # Fragmentation: how many of each flavor still fit.
        assert page["flavors"]["m1.xlarge"] == fits(
            rows, {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 160}
        )
        assert page["flavors"]["m1.giant"] == 0
        # The NoValidHost's reason and the reschedule, from /metrics.
        assert page["reasons"]["insufficient MEMORY_MB"][1] == "1"
        # (Each failed build on bad-0000 was rescheduled; all before the page opened.)
        failed = sum(len(cluster.store.get_instance(u).tried_hosts) for u in booted)
        assert failed >= 1
        assert ["rescheduled", "build", "0", str(failed)] in page["counters"]

        # Live: more boots, and the same page (no reload) catches up.
        used_before = page["hosts"]
        more = boot_nowait(cluster, "--count", "4", "--flavor", "m1.small")
        wait_until(
            lambda: {cluster.store.get_instance(u).state for u in more} == {"ACTIVE"},
            timeout=60,
            what="four more instances ACTIVE",
        )
        expected = as_page_shows(hosts_json(cluster))
        assert expected != used_before
        wait_until(
            lambda: browser.evaluate(READ_PAGE)["hosts"] == expected,
            timeout=30,
            what="the page to show the new usage",
        )
        screenshot = browser.screenshot(tmp_path / "dashboard.png")
        assert screenshot.startswith(b"\x89PNG") and len(screenshot) > 20_000
        if os.environ.get("SCHEDULER_DASHBOARD_SCREENSHOT"):
            shutil.copy(tmp_path / "dashboard.png", os.environ["SCHEDULER_DASHBOARD_SCREENSHOT"])
    finally:
        dashboard.terminate()
        dashboard.wait(10)


def test_the_page_says_its_decisions_are_not_measured_when_no_endpoint_is_set(
    cluster: Cluster, browser: Browser
) -> None:
    """Without health ports the page showed "0/0, all answering" and 0
    decisions; it now says nothing measures them, and how to set one."""
    cluster.start_compute(1)
    dashboard, url = start_dashboard(cluster)
    try:
        assert dashboard.stdout is not None
        assert dashboard.stdout.readline().strip() == "metrics from: none"
        assert dashboard.stdout.readline().strip() == f"dashboard: {NO_ENDPOINT}"
        browser.open(url)
        browser.wait_for("document.body && Number(document.body.dataset.polls) >= 1")
        shown = browser.evaluate(
            """(() => {
              const notice = document.getElementById('unmeasured');
              const card = (name) =>
                document.querySelector(`[data-card="${name}"] .value`).textContent;
              return {
                notice: notice.hidden ? null : notice.textContent,
                decisions: card('decisions / s'),
                endpoints: card('metrics endpoints'),
              };
            })()"""
        )
        assert shown == {"notice": NO_ENDPOINT, "decisions": "not measured", "endpoints": "none"}
    finally:
        dashboard.terminate()
        dashboard.wait(10)
