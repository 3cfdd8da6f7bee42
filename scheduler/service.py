"""Wiring: from options to a running scheduler worker.

The one place where configuration is read for the worker; everything below
gets plain values. Used by the ``scheduler-worker`` daemon and by the
all-in-one demo, so both run exactly the same code.
"""

from __future__ import annotations

import time
from typing import Any

import oslo_messaging
from oslo_config import cfg

from scheduler import notify_transport, rpc
from scheduler.engine import plugins
from scheduler.engine.pipeline import Engine, build_plugins
from scheduler.engine.settings import EngineSettings, PciAlias
from scheduler.exceptions import StoreUnavailable
from scheduler.log import get_logger, mask_secrets
from scheduler.manager import SchedulerEndpoint
from scheduler.notifier import Notifier
from scheduler.nova_compat.endpoint import NovaSchedulerEndpoint
from scheduler.nova_compat.endpoint import get_server as nova_server
from scheduler.nova_compat.notifications import NovaNotifications
from scheduler.priority import PriorityClasses
from scheduler.store import Store
from scheduler.store.services import ServiceResolver
from scheduler.weighers import profiles

LOG = get_logger(__name__)


def _pci_aliases(texts: list[str]) -> dict[str, PciAlias]:
    aliases = [PciAlias.from_json(text) for text in texts]
    return {alias.name: alias for alias in aliases}


def engine_settings(conf: cfg.ConfigOpts) -> EngineSettings:
    """The engine's settings from the options; a malformed value raises ValueError."""
    fs, sc = conf.filter_scheduler, conf.scheduler
    # The filters' and weighers' own options, each plugin's as it declares them;
    # those the weigher profile gives defaults to only where they are set.
    options = plugins.read_options(lambda name: getattr(fs, name))
    for name in profiles.named_options(fs.weigher_profile):
        if name in options and not _is_set(conf, name, plugins.OPTIONS_GROUP):
            del options[name]
    return EngineSettings(
        enabled_filters=tuple(fs.enabled_filters),
        weighers=tuple(fs.weighers),
        weigher_profile=fs.weigher_profile,
        plugin_options=options,
        host_subset_size=fs.host_subset_size,
        max_attempts=sc.max_attempts,
        max_placement_results=sc.max_placement_results,
        randomize_candidates=sc.randomize_allocation_candidates,
        shape_cache=sc.shape_cache,
        service_down_time=float(sc.service_down_time),
        claim_attempts=sc.claim_attempts,
        default_availability_zone=fs.default_availability_zone,
        pci_aliases=_pci_aliases(conf.pci.alias),
        priority_classes=PriorityClasses.parse(conf.priority.classes, conf.priority.default_class),
        compute_status_filter=sc.compute_status_filter,
        query_placement_for_availability_zone=sc.query_placement_for_availability_zone,
        limit_tenants_to_placement_aggregate=sc.limit_tenants_to_placement_aggregate,
        placement_aggregate_required_for_tenants=sc.placement_aggregate_required_for_tenants,
        enable_isolated_aggregate_filtering=sc.enable_isolated_aggregate_filtering,
        query_placement_for_image_type_support=sc.query_placement_for_image_type_support,
    )


def _is_set(conf: cfg.ConfigOpts, name: str, group: str) -> bool:
    """Whether option ``name`` has a value other than its default (a config file,
    the command line, an override)."""
    info = conf.get_location(name, group)
    return info is not None and info.location not in (
        cfg.Locations.opt_default,
        cfg.Locations.set_default,
    )


class SchedulerService:
    """One worker: an RPC server on the scheduler topic and what it needs; with
    ``[nova_compat] enabled``, a second one that speaks Nova's scheduler API
    (same endpoint underneath, same decisions)."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        transport: oslo_messaging.Transport,
        notification_transport: oslo_messaging.Transport | None,
        store: Store,
        server_name: str | None = None,
    ) -> None:
        self.store = store
        #: The store's address as a log line may show it (no password).
        self.store_shown = mask_secrets(conf.redis.url)
        self.engine = Engine(store, engine_settings(conf))
        self.notifier = Notifier(
            notification_transport,
            conf.host,
            topic=conf.notifications.topic,
            enabled=conf.notifications.enabled,
            notification_format=conf.notifications.format,
            versioned_topic=conf.notifications.versioned_topic,
            channel=notify_transport.channel_for(conf, notification_transport)
            if conf.notifications.enabled
            else None,
        )
        self.endpoint = SchedulerEndpoint(
            self.engine,
            rpc.ComputeClient(
                transport,
                ServiceResolver(store),
                conf.compute.topic,
                version_cap=conf.upgrade_levels.compute,
            ),
            rpc.ConductorClient(transport, conf.conductor.topic),
            self.notifier,
            allow_resize_to_same_host=conf.scheduler.allow_resize_to_same_host,
            refusals=store,
        )
        self.server = rpc.get_server(
            transport, conf.scheduler.topic, server_name or conf.host, [self.endpoint]
        )
        nc = conf.nova_compat
        #: Nova's scheduler API (None unless ``[nova_compat] enabled``).
        self.nova_server = (
            nova_server(
                transport,
                nc.exchange,
                nc.topic,
                server_name or conf.host,
                NovaSchedulerEndpoint(
                    self.endpoint,
                    nc.cell_uuid,
                    NovaNotifications(
                        self.notifier, conf.host, nc.exchange, nc.notifications_topic
                    )
                    if nc.notifications
                    else None,
                ),
            )
            if nc.enabled
            else None
        )

    def start(self) -> None:
        self._wait_for_store()
        self.server.start()
        if self.nova_server is not None:
            self.nova_server.start()
            LOG.info("nova_compat_started")
        LOG.info("scheduler_started")

    def stop(self) -> None:
        servers = [self.server] if self.nova_server is None else [self.server, self.nova_server]
        for server in servers:
            server.stop()
        for server in servers:
            server.wait()
        self.notifier.stop()  # what the requests served notified, published
        LOG.info("scheduler_stopped")

    def _wait_for_store(self, max_delay: float = 10.0) -> None:
        """Until the store answers, with bounded back-off, saying so each time
        (a wrong password or an unreachable server would otherwise be a
        silent hang at start)."""
        delay = 0.5
        while True:
            error = "no answer (unreachable, or the credentials were refused)"
            try:
                if self.store.ping():
                    return
            except StoreUnavailable as exc:
                error = exc.message
            LOG.warning("store_unreachable", store=self.store_shown, error=error, retry_in=delay)
            time.sleep(delay)
            delay = min(delay * 2, max_delay)


def describe(conf: cfg.ConfigOpts) -> dict[str, Any]:
    """What the worker logs at start: its settings, with no secret in them.

    ``weighers`` are those in effect, each with its multiplier, after the
    weigher profile added its own and gave its defaults (the ``weighers``
    option alone would show Nova's, most of them off under ``spread``)."""
    _, weighers = build_plugins(engine_settings(conf))
    return {
        "topic": conf.scheduler.topic,
        "host": conf.host,
        "filters": list(conf.filter_scheduler.enabled_filters),
        "weigher_profile": conf.filter_scheduler.weigher_profile,
        "weighers": {name: weigher.multiplier for name, weigher in weighers},
        "key_prefix": conf.redis.key_prefix,
    }
