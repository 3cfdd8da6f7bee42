"""``[DEFAULT]``: the options of this project there (oslo.messaging registers
``transport_url`` and its own)."""

from __future__ import annotations

import socket

from oslo_config import cfg

default_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="Name of this node, used in the publisher id of notifications "
        "(scheduler.<host>) and in logs.",
    ),
]
