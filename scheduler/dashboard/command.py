"""``scheduler-admin dashboard``, the command: the page's data (the store, the
catalog, the ``/metrics`` to scrape), its token, and serving it until
interrupted (see :mod:`scheduler.dashboard`)."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from scheduler.dashboard.server import make_server
from scheduler.dashboard.state import NO_ENDPOINT, Scraper, StateSource, cloud
from scheduler.exceptions import SchedulerError
from scheduler.flavors import load_catalog
from scheduler.log import mask_secrets
from scheduler.store import Store

#: The environment variable a fixed token is read from (never the command line,
#: where ``ps`` shows it).
TOKEN_ENV = "SCHEDULER_DASHBOARD_TOKEN"


class CannotListen(SchedulerError):
    """The page's address cannot be listened on (said by the command, exit status 2)."""

    msg = "cannot listen on %(address)s: %(reason)s"


def metrics_urls(conf: cfg.ConfigOpts) -> list[str]:
    """The ``/metrics`` the configuration says the workers and the conductor serve
    (on this machine when they listen on every address)."""
    listen = conf.scheduler.health_listen
    host = "127.0.0.1" if listen in ("", "0.0.0.0", "::") else listen  # noqa: S104
    urls = []
    if conf.scheduler.health_port:
        urls += [
            f"http://{host}:{conf.scheduler.health_port + n}/metrics"
            for n in range(conf.scheduler.workers)
        ]
    if conf.conductor.health_port:
        urls.append(f"http://{host}:{conf.conductor.health_port}/metrics")
    return urls


def token_from_environment() -> str:
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)


def serve(conf: cfg.ConfigOpts, store: Store, args: Any, out: Any) -> int:
    """Serve the page until interrupted; its address goes to ``out`` first."""
    catalog = load_catalog(conf.conductor.flavors_file)
    urls: Sequence[str] = args.metrics_url or metrics_urls(conf)
    down_time = float(conf.scheduler.service_down_time)
    source = StateSource(
        read_cloud=lambda: cloud(store, down_time, catalog, time.time()),
        scraper=Scraper(urls),
        min_interval=args.refresh,
    )
    token = token_from_environment()
    try:
        server = make_server(source, token, args.listen, args.port)
    except OSError as exc:
        raise CannotListen(
            address=f"{args.listen}:{args.port}", reason=exc.strerror or exc
        ) from exc
    port = server.server_address[1]
    print(f"dashboard: http://{args.listen}:{port}/#token={token}", file=out, flush=True)
    shown = ", ".join(mask_secrets(url) for url in urls)
    print(f"metrics from: {shown or 'none'}", file=out)
    if not urls:
        print(f"dashboard: {NO_ENDPOINT}", file=out)
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
