"""``[nova_compat]``: the endpoint Nova's own conductor can call."""

from __future__ import annotations

from oslo_config import cfg

nova_compat_group = cfg.OptGroup(
    "nova_compat",
    title="Nova compatibility",
    help="A second RPC server in every worker that speaks Nova's scheduler RPC API "
    "(select_destinations at 4.5, Nova's versioned objects), so that Nova's unmodified "
    "conductor can ask this scheduler for destinations. Off by default. See the "
    "administrator guide, 'Running beside Nova', for what it does and does not do.",
)

nova_compat_opts = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="Serve Nova's scheduler RPC API beside the scheduler's own. "
        "Related options: exchange, topic, cell_uuid.",
    ),
    cfg.StrOpt(
        "exchange",
        default="nova",
        help="Exchange Nova's conductor sends on (its control_exchange). Queues are "
        "named by topic alone: run beside a real Nova scheduler only on a vhost of its "
        "own. Related options: topic.",
    ),
    cfg.StrOpt(
        "topic",
        default="scheduler",
        help="Topic Nova's conductor sends select_destinations on. Related options: exchange.",
    ),
    cfg.StrOpt(
        "cell_uuid",
        default="00000000-0000-0000-0000-000000000000",
        regex=r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$",
        help="Cell uuid every Selection names (the cell of Nova's API database whose "
        "computes this scheduler places on); a requested destination in another cell "
        "is refused.",
    ),
    cfg.BoolOpt(
        "notifications",
        default=False,
        help="Also publish, for every select_destinations served by Nova's API, the "
        "versioned notifications Nova's scheduler publishes (scheduler.select_destinations"
        ".start and .end, a RequestSpecPayload in Nova's namespace, publisher "
        "nova-scheduler:<host>) on exchange [nova_compat] exchange, topic "
        "notifications_topic. The scheduler's own notifications are published as before; "
        "[notifications] enabled = False turns these off too. Related options: "
        "notifications_topic, exchange.",
    ),
    cfg.StrOpt(
        "notifications_topic",
        default="versioned_notifications",
        help="Topic Nova's versioned notifications are published on (Nova's "
        "[notifications] versioned_notifications_topics). Queues are named by topic "
        "alone: it must differ from the topics of the scheduler's own notifications "
        "([notifications] topic and versioned_topic) that are published. Related "
        "options: notifications.",
    ),
]
