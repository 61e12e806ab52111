import numpy as np
import pytest

from physai_ros.sim.render import Renderer
from physai_ros.sim.world import SimWorld


@pytest.mark.parametrize("views,width,height", [(1, 224, 224), (2, 320, 240), (3, 640, 480)])
def test_render_shapes_and_content(views, width, height):
    w = SimWorld(task="pick_and_place", seed=0)
    imgs = Renderer(w.arm.cfg, num_views=views, width=width, height=height).render(w.snapshot())
    assert len(imgs) == views
    for img in imgs:
        assert img.shape == (height, width, 3) and img.dtype == np.uint8
        # The cube is drawn: strongly blue pixels exist; the pad: strongly green ones.
        r, g, b = (img[..., i].astype(int) for i in range(3))
        assert np.any((b - r > 80) & (b - g > 60))
        assert np.any((g - r > 60) & (g - b > 40))
    assert not np.array_equal(imgs[0], imgs[-1]) or views == 1


def test_render_follows_the_arm():
    w = SimWorld(task="reach", seed=1)
    r = Renderer(w.arm.cfg)
    before = r.render(w.snapshot())[0]
    w.set_command(np.concatenate([w.arm.cfg.home() + [0.8, -0.3, 0.2, 0.1], [0.0]]))
    for _ in range(480):
        w.step(1 / 480)
    after = r.render(w.snapshot())[0]
    assert np.mean(np.any(before != after, axis=2)) > 0.005


@pytest.mark.parametrize("kwargs", [dict(num_views=0), dict(num_views=4), dict(width=641), dict(height=481),
                                    dict(width=8)])
def test_render_rejects_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        Renderer(SimWorld().arm.cfg, **kwargs)
