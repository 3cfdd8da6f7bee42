"""``[upgrade_levels]``: the RPC versions a client may send during a rolling
upgrade."""

from __future__ import annotations

from oslo_config import cfg

upgrade_levels_group = cfg.OptGroup(
    "upgrade_levels",
    title="Upgrade levels",
    help="Caps on the RPC versions sent to services not yet upgraded. Set while a "
    "rolling upgrade is under way, then unset. See the administrator guide, "
    "'Upgrades'.",
)

upgrade_levels_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        "compute",
        regex=r"^1\.[0-9]+$",
        help="The highest compute RPC version the workers and the conductor send "
        "(for example 1.8, the oldest compute's, while computes are being "
        "upgraded). Below 1.9 a request's builds go one cast per instance "
        "instead of one per compute process. Unset: the newest.",
    ),
]
