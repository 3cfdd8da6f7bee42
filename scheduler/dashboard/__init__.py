"""``scheduler-admin dashboard``: a live, read-only picture of the cloud in a browser.

One page (:mod:`scheduler.dashboard.server`, plain HTML and JavaScript served
from this package) polls one JSON document (:mod:`scheduler.dashboard.state`)
every two seconds and shows: each host's fill per resource class as a heat
map grouped by aggregate (and its availability zone), hosts down or
disabled, how many of each catalog flavor still fit, decisions per second
and the time they take and wait, the reasons of recent NoValidHosts,
reschedules, re-drives and retries exhausted.

The hosts are read from the store by ``scheduler-admin hosts``' own code, in
pages; the rates from the ``/metrics`` of the workers (``[scheduler]
health_port`` + n, for each of ``[scheduler] workers``) and of the conductor
(``[conductor] health_port``) on ``[scheduler] health_listen``, or from the
``--metrics-url`` given. The page is bound to 127.0.0.1 unless ``--listen``
says otherwise, and its data needs a token: the one in the environment
variable ``SCHEDULER_DASHBOARD_TOKEN``, else a random one made at start; the
command prints the page's address with the token in its fragment
(:mod:`scheduler.dashboard.command`).
"""
