"""The conductor's Prometheus metrics, defined once (served on its ``/metrics``,
``[conductor] health_port``). Their names are part of the operator interface:
the README lists them and ``etc/grafana-dashboard.json`` graphs them; keep them
stable. Counters are exposed with Prometheus' ``_total`` suffix.

* ``conductor_reschedules_total{kind}``: failed builds (``build``) or move
  destinations (``resize``, ``live_migration``, ``rebuild``) sent on to
  another host: an attempt recorded and the next alternate (or the
  scheduler) tried.
* ``conductor_retries_exhausted_total{kind}``: requests that ran out of
  attempts (``max_attempts`` destinations failed, or no alternate left to
  claim): a boot in ERROR, a move back on its source, an evacuation given up.
* ``conductor_redrives_total{kind}``: requests re-sent past their deadline
  (``run_instance``, ``resize``, ``confirm``, ``revert``, ``terminate``,
  ``shelve``, ``evacuate``, ``live_migrate``; :mod:`conductor_stub.redrive`).
* ``conductor_requests_timed_out_total{kind}``: requests given up after
  ``max_redrives`` re-drives.
* ``conductor_reconcile_actions_total{kind}``: repairs the reconciler made.
* ``conductor_reconcile_findings{kind}``: what the reconciler's last pass
  found, by kind (:mod:`conductor_stub.findings`), acted on or not: an
  ``overcommit`` stays here until it is resolved.
* ``conductor_pending_requests``: the requests waiting for capacity (the
  store's pending index), read by the retrier every turn.
* ``conductor_pending_wait_seconds{outcome}``: how long a request waited for
  capacity, from its first "no valid host" to ``placed`` (ACTIVE, seen by the
  retrier that sent it) or ``timed_out`` (ERROR past its wait).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RESCHEDULES = Counter(
    "conductor_reschedules",
    "Failed builds or move destinations sent on to another host, by kind (build, "
    "resize, live_migration, rebuild).",
    ["kind"],
)
RETRIES_EXHAUSTED = Counter(
    "conductor_retries_exhausted",
    "Requests that ran out of attempts (max_attempts destinations failed or no "
    "alternate left), by kind (build, resize, live_migration, rebuild).",
    ["kind"],
)
REDRIVES = Counter(
    "conductor_redrives",
    "Requests re-sent because their deadline passed unanswered, by kind.",
    ["kind"],
)
TIMED_OUT = Counter(
    "conductor_requests_timed_out",
    "Requests given up after max_redrives re-drives, by kind.",
    ["kind"],
)
ACTIONS_TAKEN = Counter(
    "conductor_reconcile_actions",
    "Repairs the reconciler made, by finding kind.",
    ["kind"],
)
FINDINGS = Gauge(
    "conductor_reconcile_findings",
    "What the reconciler's last pass found, by kind, acted on or not (an "
    "overcommit stays until an operator or a move resolves it).",
    ["kind"],
)
PENDING_REQUESTS = Gauge(
    "conductor_pending_requests",
    "Requests waiting for capacity (PENDING), as the store's pending index counts them.",
)
PENDING_WAIT_SECONDS = Histogram(
    "conductor_pending_wait_seconds",
    "Time a request waited for capacity, from its first no valid host to its end, by "
    "outcome (placed: ACTIVE; timed_out: ERROR past its max_wait).",
    ["outcome"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
