"""ImagePropertiesWeigher: hosts running instances of alike images."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.engine.capabilities import image_property_stat
from scheduler.engine.plugins import build
from scheduler.weighers.image_properties import ImagePropertiesWeigher
from tests.unit.factories import context, host, settings, spec, view_of
from tests.unit.weighers.helpers import raw_of

LINUX, Q35 = (
    image_property_stat("os_distro", "ubuntu"),
    image_property_stat("hw_machine_type", "q35"),
)
HOSTS = [
    host("both", stats={LINUX: 1, Q35: 1}),
    host("distro", stats={LINUX: 3}),
    host("machine", stats={Q35: 2}),
    host("none"),
]
REQUEST = {"os_distro": "ubuntu", "hw_machine_type": "q35"}


@pytest.mark.parametrize(
    ("props", "setting", "raw"),
    [
        pytest.param(REQUEST, {}, [2, 3, 2, 0], id="every-property-counts-one"),
        pytest.param(REQUEST, {"os_distro": 10.0}, [10, 30, 0, 0], id="setting-weighs-and-limits"),
        pytest.param(
            REQUEST,
            {"os_distro": 1.0, "hw_machine_type": 0.5},
            [1.5, 3, 1, 0],
            id="setting-fractional",
        ),
        pytest.param({"os_distro": "fedora"}, {}, [0, 0, 0, 0], id="other-value"),
        pytest.param(None, {}, [0, 0, 0, 0], id="no-image"),
    ],
)
def test_image_properties_raw(
    props: dict[str, str] | None, setting: dict[str, float], raw: list[float]
) -> None:
    view = view_of(*HOSTS)
    request = spec(image_properties=props) if props is not None else spec()
    weigher = build(ImagePropertiesWeigher, settings(image_props_weight_setting=setting))
    got = raw_of(weigher, view, context(request))
    assert got.tolist() == pytest.approx(raw)


@pytest.mark.parametrize(
    ("multiplier", "best"),
    [
        pytest.param(0.0, None, id="default-off"),
        pytest.param(1.0, "distro", id="positive-packs-alike"),
        pytest.param(-1.0, "none", id="negative-spreads-alike"),
    ],
)
def test_image_properties_multiplier(multiplier: float, best: str | None) -> None:
    view = view_of(*HOSTS)
    weigher = ImagePropertiesWeigher(
        settings(), ImagePropertiesWeigher.Args(image_props_weight_multiplier=multiplier)
    )
    assert weigher.multiplier == multiplier
    ctx = context(spec(image_properties=REQUEST))
    weights = weigher.weigh(view, np.arange(view.size), ctx, weigher.prepare(ctx))
    if best is None:
        assert not weights.any()
    else:
        assert view.names[int(np.argmax(weights))] == best
