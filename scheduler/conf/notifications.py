"""``[notifications]``: what the scheduler publishes for consumers."""

from __future__ import annotations

from oslo_config import cfg

from scheduler.notifier import FORMATS

notifications_group = cfg.OptGroup(
    "notifications",
    title="Notifications",
    help="What the scheduler publishes for consumers. These options, not "
    "[oslo_messaging_notifications] driver and topics, decide it: the worker always "
    "publishes with the messagingv2 driver on [notifications] topic, and ignores those "
    "two (only [oslo_messaging_notifications] transport_url and retry are read).",
)

notifications_opts = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Publish scheduler.* notifications (driver messagingv2). "
        "[oslo_messaging_notifications] driver is not read: set this to False to "
        "publish none (a driver of noop there does not).",
    ),
    cfg.StrOpt(
        "topic",
        default="notifications",
        help="Topic the legacy (unversioned) notifications are published on, "
        "in the shape they have always had ([oslo_messaging_notifications] topics "
        "is not read). Related options: format.",
    ),
    cfg.StrOpt(
        "format",
        default="both",
        choices=list(FORMATS.items()),
        help="Which notifications are published. The versioned payloads are "
        "typed objects in Nova's envelope (nova_object.name, .namespace, "
        ".version, .data), documented with a sample per event in "
        "doc/notification_samples/; failures are <event>.error there. Each "
        "format is one broker publish per notification, on the worker's "
        "notifier thread. Related options: topic, versioned_topic.",
    ),
    cfg.StrOpt(
        "versioned_topic",
        default="versioned_notifications",
        help="Topic the versioned notifications are published on (Nova's "
        "default name). Related options: format.",
    ),
    cfg.BoolOpt(
        "publish_confirm",
        default=True,
        help="Wait for the broker's confirms of each batch of notifications the "
        "notifier thread publishes (one wait per batch, not per message). With "
        "confirms a notification is held by the broker before the worker forgets "
        "it; a connection lost before the confirm is opened again and the batch "
        "published again (a consumer may see a notification twice). Without, a "
        "notification written to the socket counts as sent: a broker that fails "
        "right after loses it. Either way, notifications still queued in the "
        "worker are lost if the worker dies. Applies to a RabbitMQ notification "
        "transport.",
    ),
]
