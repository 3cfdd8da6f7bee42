"""No secret ever leaves a daemon: passwords in the broker and store URLs, over TLS.

The daemons run with passwords in both their URLs, and over TLS on both:
RabbitMQ as a user of the test's virtual host on the private node's TLS
listener (``[oslo_messaging_rabbit] ssl`` with the test CA), and Redis as an
ACL user (the default user turned off) on a private ``redis-server`` that
listens on a TLS port only (``rediss://user:password@host:port/0?ssl_ca_certs=``;
its default user has a password of its own).
The deployment is then made to fail every way it can tell someone about:
boots that find no host, input refused on a call and on a cast, a
non-admin's explain, the store restarted under the daemons, and a worker
started with a wrong store password. Everything they wrote is scanned — every
log line, every notification, every error a caller got back, every
instance's fault and admin-only fault details, and what ``scheduler-admin``
prints — and no password appears in any of it.
"""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduler import conf as conf_mod
from scheduler import rpc
from scheduler.cmd.notify_tail import listen
from scheduler.exceptions import Forbidden, InvalidRequest, NoValidHost
from scheduler.log import mask_secrets
from scheduler.objects import Flavor, RequestSpec
from tests.fixtures.cli import admin_cli
from tests.functional_faults.conftest import (
    Certs,
    FaultCluster,
    PrivateRabbit,
    PrivateRedis,
    free_port,
    healthz,
    wait_until,
)

RABBIT_USER, REDIS_USER = "sched-app", "sched-store"
# Unique, so a hit can only be a leak.
RABBIT_PASSWORD = f"rabbitPW{uuidlib.uuid4().hex}"
REDIS_PASSWORD = f"redisPW{uuidlib.uuid4().hex}"
WRONG_PASSWORD = f"wrongPW{uuidlib.uuid4().hex}"
DEFAULT_PASSWORD = f"defaultPW{uuidlib.uuid4().hex}"  # Redis's default user's
SECRETS = (RABBIT_PASSWORD, REDIS_PASSWORD, WRONG_PASSWORD, DEFAULT_PASSWORD)
TINY = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)


@pytest.fixture
def secured(
    private_redis: Callable[..., PrivateRedis],
    certs: Certs,
    private_rabbit: PrivateRabbit,
    make_cluster: Callable[..., FaultCluster],
) -> Iterator[tuple[FaultCluster, PrivateRedis]]:
    """A deployment whose broker and store both want a password, over TLS."""
    # The default user keeps a password of its own: with ``user default off``,
    # Redis 7.0 did not replay the store's scripted writes from its
    # append-only file at restart (NOPERM on EXEC) and came back empty.
    redis_server = private_redis(
        "--requirepass",
        DEFAULT_PASSWORD,
        "--user",
        REDIS_USER,
        "on",
        f">{REDIS_PASSWORD}",
        "~*",
        "&*",
        "+@all",
        tls=certs,
    )
    ident = uuidlib.uuid4().hex[:10]
    vhost = f"test-{ident}"
    try:
        private_rabbit.ctl("add_user", RABBIT_USER, RABBIT_PASSWORD)
    except AssertionError:  # left by an earlier test of this session
        private_rabbit.ctl("change_password", RABBIT_USER, RABBIT_PASSWORD)
    cluster = make_cluster(
        ident=ident,
        redis_url=redis_server.url(REDIS_USER, REDIS_PASSWORD, host="localhost"),
        rabbit_url=private_rabbit.url(
            vhost, RABBIT_USER, RABBIT_PASSWORD, tls=True, host="localhost"
        ),
        rabbit_options={"ssl": True, "ssl_ca_file": str(certs.ca)},
    )
    private_rabbit.ctl("set_permissions", "-p", vhost, RABBIT_USER, ".*", ".*", ".*")
    yield cluster, redis_server


def test_no_password_reaches_a_log_a_notification_an_error_or_a_fault(
    secured: tuple[FaultCluster, PrivateRedis], private_rabbit: PrivateRabbit, tmp_path: Any
) -> None:
    cluster, redis_server = secured
    port = free_port()
    cluster.write_config(
        scheduler={"health_port": port}, conductor={"build_timeout": 4, "sweep_interval": 0.5}
    )
    conductor = cluster.start_conductor()
    compute = cluster.start_compute(3, "--vcpus", "2", "--build-time", "0.01")
    worker = cluster.start_worker()
    worker.wait_for("health_endpoint")
    assert healthz(port)[0] == 200, "worker healthy over TLS on both"

    # The test listens and calls as the admin user over the plain listener.
    conf = conf_mod.CONF
    conf_mod.set_defaults()
    conf([], project="scheduler", default_config_files=[])
    plain = private_rabbit.url(cluster.vhost)
    notifications: list[dict[str, Any]] = []
    note_transport = rpc.get_notification_transport(conf, url=plain)
    # Both formats (the default), on one list.
    listeners = [
        listen(note_transport, topic, notifications.append, pool="secrets")
        for topic in ("notifications", "versioned_notifications")
    ]
    transport = rpc.get_transport(conf, url=plain)
    client = rpc.SchedulerClient(transport, timeout=30)
    errors: list[str] = []
    try:
        # Boots that succeed, and boots that find no host.
        ok = cluster.boot("--count", "3", "--flavor", "m1.tiny")
        assert ok["summary"]["states"] == {"ACTIVE": 3}
        failed = cluster.boot("--count", "2", "--flavor", "m1.xlarge")
        assert failed["summary"]["states"] == {"ERROR": 2}
        # Refusals and errors a caller gets back.
        member = rpc.RequestContext(user_id="u", project_id="p")
        for call, kind in (
            (
                lambda: client.call_raw(
                    member, "select_destinations", request_spec={"flavor": "x"}, instance_uuids=[]
                ),
                InvalidRequest,
            ),
            (
                lambda: client.explain(
                    member, RequestSpec(flavor=TINY, project_id="p", user_id="u")
                ),
                Forbidden,
            ),
            (
                lambda: client.select_destinations(
                    member,
                    RequestSpec(flavor=TINY, project_id="p", user_id="u", num_instances=50),
                    [str(uuidlib.uuid4()) for _ in range(50)],
                ),
                NoValidHost,
            ),
        ):
            with pytest.raises(kind) as err:
                call()
            errors.append(f"{type(err.value).__name__}: {err.value} {err.value.__dict__}")
        forced = RequestSpec(flavor=TINY, project_id="p", user_id="u", force_hosts=("x",))
        client.run_instance(member, forced, [str(uuidlib.uuid4())])
        # The store goes away under every daemon, and comes back.
        redis_server.stop()
        wait_until(lambda: healthz(port)[0] == 503, 20, "the worker to see the store down")
        time.sleep(2)
        redis_server.start()
        wait_until(lambda: healthz(port)[0] == 200, 30, "the worker to see the store back")
        again = cluster.boot("--count", "2", "--flavor", "m1.tiny")
        assert again["summary"]["states"] == {"ACTIVE": 2}
        # A worker with a wrong store password says so, without the password.
        wrong = tmp_path / "wrong.conf"
        wrong_url = redis_server.url(REDIS_USER, WRONG_PASSWORD, host="localhost")
        wrong.write_text(f"[redis]\nurl = {wrong_url}\n")
        bad_worker = cluster.start(
            "worker-wrong-password", "scheduler.cmd.worker", "--config-file", str(wrong)
        )
        bad_worker.wait_for("store_unreachable", timeout=30)
        (unreachable, *_) = [
            e for e in bad_worker.log_events() if e.get("event") == "store_unreachable"
        ]
        assert unreachable["store"] == mask_secrets(wrong_url)  # where, without the password
        bad_worker.stop()
        admin_out = [
            admin_cli(cluster, *args)
            for args in (
                ("hosts", "--json"),
                ("instance", "show", failed["instances"][0]["uuid"], "--json"),
            )
        ]
        wait_until(
            lambda: (
                len(notifications) >= 40
                and any(n["event_type"] == "scheduler.run_instance.error" for n in notifications)
            ),
            20,
            "notifications in both formats",
        )
    finally:
        for listener in listeners:
            listener.stop()
            listener.wait()
        note_transport.cleanup()
        transport.cleanup()

    records = cluster.store.list_instances()
    written = {
        "logs": cluster.logs(),
        "notifications": json.dumps(notifications, default=str),
        "errors returned to callers": "\n".join(errors),
        "instance faults": json.dumps([(r.fault, r.fault_details) for r in records]),
        "scheduler-admin": "".join(out.stdout + out.stderr for out in admin_out),
    }
    for where, text in written.items():
        for secret in SECRETS:
            assert secret not in text, f"a password leaked into the {where}"
    # The scan read what it claims to: the daemons logged, faults were written.
    assert conductor.count("conductor_started") and compute.count("compute_sim_started")
    assert any(r.fault == NoValidHost.USER_MESSAGE and r.fault_details for r in records)
    assert any(n["event_type"] == "scheduler.run_instance.end" for n in notifications)
    assert any(n["event_type"] == "scheduler.run_instance.error" for n in notifications)
    assert (
        worker.count("store_unavailable")
        + conductor.count("sweep_failed")
        + compute.count("heartbeat_failed")
        > 0
    ), "the store outage was seen and logged"
    assert all(out.returncode == 0 for out in admin_out)
