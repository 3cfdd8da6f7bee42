"""Nova 34's own client, driven from the side environment (run with its python).

Nothing here imports the project: this is the caller a Nova deployment runs,
Nova's unmodified ``nova.scheduler.rpcapi.SchedulerAPI`` sending Nova-built
``RequestSpec`` objects over oslo.messaging with Nova's serializer, exactly as
Nova's conductor does (``nova/conductor/manager.py`` and ``tasks/``).

Usage: ``drive.py --config-file nova.conf`` (a Nova config file: its
``transport_url`` the deployment's vhost) and one JSON request per line on
stdin; one JSON answer per line on stdout, in order, until stdin closes (the
first line says it is ready). A request::

    {"instance_uuids": [...], "return_alternates": true, "spec": {...}}

or the payloads of notifications read off the broker, for Nova's own payload
classes to read::

    {"notification_payloads": [{...}, ...]}

``spec`` says what to build, the way Nova's API and conductor build it:
``flavor`` (name, vcpus, memory_mb, root_gb, ephemeral_gb, swap,
extra_specs), ``image`` (its properties), ``num_instances``, ``group``
(policy, uuid, rules, members: an ``InstanceGroup`` as
``setup_instance_group`` leaves it), ``ignore_hosts``, ``retry`` (hosts
tried, as ``[host, node]`` pairs), ``requested_destination`` (host, node,
cell uuid), ``availability_zone``, ``scheduler_hints``, ``project_id``,
``user_id``. The answer is ``{"selections": [[{field: value}, ...], ...]}``
(each Selection's set fields and its version as received) or ``{"error":
{"class", "is_a", "message"}}``: the exception as the caller got it, with
every class it is an instance of; either with ``"payload"``, the
``RequestSpecPayload`` Nova's scheduler makes of that RequestSpec as it
receives it (``nova.compute.utils.notify_about_scheduler_action``'s, as a
primitive). The answer to notification payloads is ``{"read": [...]}``: each
payload as Nova's ``RequestSpecPayload`` read it (``obj_from_primitive``),
written out again, or ``{"error": ...}`` naming the first it could not read.
"""

from __future__ import annotations

import json
import sys
import uuid as uuidlib
import warnings
from typing import Any

# Nova's imports warn about eventlet; the answers go to the real stdout, and
# anything else printed goes to stderr.
warnings.simplefilter("ignore")
ANSWERS = sys.stdout
sys.stdout = sys.stderr

import nova.conf  # noqa: E402
from nova import config as nova_config  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import objects, rpc  # noqa: E402
from nova.notifications.objects import base as notification_objects  # noqa: E402
from nova.notifications.objects import request_spec as payloads  # noqa: E402
from nova.scheduler import rpcapi  # noqa: E402

CONF = nova.conf.CONF
FLAVOR_DEFAULTS = {"ephemeral_gb": 0, "swap": 0, "extra_specs": {}}


def configure(argv: list[str]) -> None:
    """As a Nova service starts (``nova.cmd.conductor``), minus its databases."""
    nova_config.parse_args(argv, default_config_files=[], configure_db=False)
    objects.register_all()
    # The notification payload classes too, so that a payload can be read back
    # (as Nova's own notification tests register them); each is made from its
    # source object, so reading one makes it with none.
    objects.base.NovaObjectRegistry.register_notification_objects()
    for cls in objects.base.NovaObjectRegistry.notification_classes:
        cls.__init__ = _readable(cls.__init__)


def _readable(init: Any) -> Any:
    """``init``, or, called with no source object (as oslo.versionedobjects
    makes an object it reads), an empty notification object."""

    def made(self: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            init(self, *args, **kwargs)
        else:
            notification_objects.NotificationObject.__init__(self)

    return made


def flavor(data: dict[str, Any]) -> Any:
    values = {**FLAVOR_DEFAULTS, **data}
    return objects.Flavor(
        id=values.pop("id", 1),
        flavorid=values["name"],
        rxtx_factor=1.0,
        vcpu_weight=0,
        disabled=False,
        is_public=True,
        description=None,
        **values,
    )


def image(properties: dict[str, Any]) -> dict[str, Any]:
    """An image as Glance returns it (``from_components`` makes an ImageMeta)."""
    return {
        "id": str(uuidlib.uuid4()),
        "name": "test-image",
        "status": "active",
        "container_format": "bare",
        "disk_format": "qcow2",
        "min_ram": 0,
        "min_disk": 0,
        "size": 1 << 20,
        "properties": properties,
    }


def instance_group(data: dict[str, Any], project_id: str, user_id: str) -> Any:
    """A server group as ``setup_instance_group`` hands it to the scheduler."""
    return objects.InstanceGroup(
        uuid=data["uuid"],
        name="group",
        project_id=project_id,
        user_id=user_id,
        policy=data["policy"],
        rules=data.get("rules", {}),
        members=data.get("members", []),
        hosts=data.get("hosts", []),
    )


def destination(data: dict[str, Any], transport_url: str) -> Any:
    """A requested destination; with a cell, as the live-migration task sets it."""
    dest = objects.Destination(host=data["host"], node=data.get("node"))
    if "cell_uuid" in data:
        dest.cell = objects.CellMapping(
            uuid=data["cell_uuid"],
            name="cell1",
            transport_url=transport_url,
            database_connection="mysql+pymysql://nova:secret@db/nova_cell1",
            disabled=False,
        )
    return dest


def request_spec(ctxt: Any, uuids: list[str], data: dict[str, Any], transport_url: str) -> Any:
    """A RequestSpec built as Nova's API builds one for a boot, then changed as
    the conductor changes it for the move at hand."""
    project_id = data.get("project_id", ctxt.project_id)
    user_id = data.get("user_id", ctxt.user_id)
    group = data.get("group")
    filter_properties: dict[str, Any] = {"scheduler_hints": data.get("scheduler_hints", {})}
    spec = objects.RequestSpec.from_components(
        ctxt,
        uuids[0],
        image(data.get("image", {})),
        flavor(data["flavor"]),
        None,
        objects.InstancePCIRequests(requests=[]),
        filter_properties,
        instance_group(group, project_id, user_id) if group else None,
        data.get("availability_zone"),
        security_groups=objects.SecurityGroupList(objects=[objects.SecurityGroup(name="default")]),
        project_id=project_id,
        user_id=user_id,
    )
    spec.is_bfv = False
    spec.num_instances = data.get("num_instances", len(uuids))
    if "ignore_hosts" in data:
        spec.ignore_hosts = data["ignore_hosts"]
    if "retry" in data:
        spec.retry = objects.SchedulerRetries.from_dict(
            ctxt, {"num_attempts": len(data["retry"]) + 1, "hosts": data["retry"]}
        )
    if "requested_destination" in data:
        spec.requested_destination = destination(data["requested_destination"], transport_url)
    return spec


def fields_of(obj: Any) -> dict[str, Any]:
    """A versioned object's set fields, nested objects as dicts, and its version."""
    out: dict[str, Any] = {"_version": obj.VERSION}
    for name in obj.fields:
        if not obj.obj_attr_is_set(name):
            continue
        value = getattr(obj, name)
        out[name] = fields_of(value) if isinstance(value, objects.base.NovaObject) else value
    return out


def nova_payload(spec: Any) -> dict[str, Any]:
    """The payload Nova's scheduler notifies of ``spec``, made of the spec as it
    arrives there (serialized and read back, as Nova's RPC does)."""
    received = objects.RequestSpec.obj_from_primitive(
        json.loads(json.dumps(spec.obj_to_primitive()))
    )
    payload = payloads.RequestSpecPayload(received)
    payload.obj_reset_changes(recursive=True)  # as NotificationBase.emit
    made: dict[str, Any] = json.loads(json.dumps(payload.obj_to_primitive()))
    return made


def read_payloads(primitives: list[dict[str, Any]]) -> dict[str, Any]:
    """Each payload read by Nova's RequestSpecPayload, written out again."""
    read = []
    for n, primitive in enumerate(primitives):
        try:
            obj = payloads.RequestSpecPayload.obj_from_primitive(primitive)
            if not isinstance(obj, payloads.RequestSpecPayload):
                raise TypeError(f"{type(obj).__name__} is not a RequestSpecPayload")
        except Exception as exc:  # what Nova's reader said, told back to the test
            return {"error": {"index": n, "class": type(exc).__name__, "message": str(exc)}}
        read.append(json.loads(json.dumps(obj.obj_to_primitive())))
    return {"read": read}


def answer(client: Any, ctxt: Any, request: dict[str, Any], transport_url: str) -> dict[str, Any]:
    if "notification_payloads" in request:
        return read_payloads(request["notification_payloads"])
    uuids = request["instance_uuids"]
    spec = request_spec(ctxt, uuids, request["spec"], transport_url)
    made = {"payload": nova_payload(spec)}
    try:
        selections = client.select_destinations(
            ctxt,
            spec,
            uuids,
            return_objects=True,
            return_alternates=request["return_alternates"],
        )
    except Exception as exc:  # what the caller got, told back to the test
        # oslo.messaging rebuilds a remote exception of an allowed module as a
        # subclass of it (nova.exception_Remote.NoValidHost_Remote): the
        # classes it is an instance of are what a caller's except clause sees.
        return {
            **made,
            "error": {
                "class": f"{type(exc).__module__}.{type(exc).__name__}",
                "is_a": [f"{c.__module__}.{c.__name__}" for c in type(exc).__mro__],
                "message": str(exc),
            },
        }
    return {**made, "selections": [[fields_of(s) for s in per] for per in selections]}


def main() -> None:
    configure(sys.argv)
    transport_url = CONF.transport_url
    ctxt = nova_context.RequestContext(
        user_id="nova-compat-user",
        project_id="nova-compat-project",
        is_admin=True,
        roles=["admin", "member", "reader"],
    )
    client = rpcapi.SchedulerAPI()
    print(json.dumps({"ready": True}), file=ANSWERS, flush=True)
    for line in sys.stdin:
        if line.strip():
            result = answer(client, ctxt, json.loads(line), transport_url)
            print(json.dumps(result, default=str), file=ANSWERS, flush=True)
    rpc.cleanup()


if __name__ == "__main__":
    main()
