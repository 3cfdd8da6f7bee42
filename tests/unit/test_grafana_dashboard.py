"""etc/grafana-dashboard.json graphs every metric the worker and the conductor
export, and no metric they do not; the metrics page of the documentation
(doc/source/admin/metrics.rst) names each of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import conductor_stub.metrics
import conductor_stub.reconcile  # noqa: F401 - its metrics are the conductor's
from scheduler import health

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "etc" / "grafana-dashboard.json"
#: What Prometheus adds to a family's name in its samples.
SUFFIXES = re.compile(r"_(total|bucket|sum|count)$")
NAME = re.compile(r"\b((?:scheduler|conductor)_[a-z_]+)\b")


def exported() -> set[str]:
    """The project's metric families: those on the process's registry (the
    worker's and the conductor's modules are imported above) and the gauges
    the worker's view collector makes at scrape time."""
    assert conductor_stub.metrics.RESCHEDULES is not None
    names = {
        metric.name
        for metric in REGISTRY.collect()
        if metric.name.startswith(("scheduler_", "conductor_"))
    }
    return names | set(health.VIEW_GAUGES)


def graphed() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    names = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} graphs nothing"
        for target in panel["targets"]:
            names |= {SUFFIXES.sub("", n) for n in NAME.findall(target["expr"])}
    return names


def test_the_dashboard_graphs_every_exported_metric_and_nothing_else() -> None:
    assert graphed() == exported()


def test_the_panels_have_distinct_ids_and_places() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels}) == len(panels)


def test_the_metrics_page_names_every_metric() -> None:
    page = (ROOT / "doc" / "source" / "admin" / "metrics.rst").read_text()
    missing = [name for name in sorted(exported()) if name not in page]
    assert missing == []
