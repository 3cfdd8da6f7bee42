"""``.. nova-unread-options::``: Nova's options this scheduler does not read,
and what it reads instead, as a table rendered from the one table of them
(:data:`scheduler.conf.unread.NOVA_EQUIVALENTS` and ``NOVA_GROUPS``), which
the daemons also use to warn at start."""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive

from scheduler.conf.unread import NOVA_EQUIVALENTS, NOVA_GROUPS


def _row(*cells: str) -> nodes.row:
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text)
        row += entry
    return row


class NovaUnreadOptions(Directive):
    def run(self) -> list[nodes.Node]:
        table = nodes.table()
        group = nodes.tgroup(cols=2)
        table += group
        for width in (40, 60):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row("Nova", "read here instead")
        group += head
        body = nodes.tbody()
        for (section, name), instead in sorted(NOVA_EQUIVALENTS.items()):
            body += _row(f"[{section}] {name}", instead)
        for section, instead in sorted(NOVA_GROUPS.items()):
            body += _row(f"[{section}] (the whole group)", instead)
        group += body
        return [table]


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension hook
    app.add_directive("nova-unread-options", NovaUnreadOptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
