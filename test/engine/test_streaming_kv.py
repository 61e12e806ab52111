import threading

import pytest
import torch

from physai_ros.engine import PrefixCache
from physai_ros.engine.streaming.kv_exchange import KVDoubleBuffer


def cache(fill: float, b: int = 2, t: int = 5) -> PrefixCache:
    k = [torch.full((b, t, 1, 4), fill), torch.full((b, t, 1, 4), fill + 0.5)]
    v = [x.clone() * 2 for x in k]
    return PrefixCache(keys=k, values=v, pad=torch.ones(b, t, dtype=torch.bool), next_pos=torch.full((b,), t))


def test_readers_get_the_newest_complete_snapshot_with_rising_versions():
    buf = KVDoubleBuffer()
    with buf.read() as snap:
        assert snap is None
    for i in range(1, 5):
        assert buf.publish(cache(float(i)), ["a", "b"], [0.0, 1.0], 2.0) == i
        with buf.read() as snap:
            assert snap.version == i and snap.robot_ids == ("a", "b") and snap.captured_at == (0.0, 1.0)
            # Every layer of the snapshot comes from the same pass.
            assert float(snap.cache.keys[0].max()) == float(snap.cache.keys[0].min()) == float(i)
            assert float(snap.cache.values[1].min()) == 2 * (i + 0.5)


def test_published_cache_is_a_copy_so_the_writer_can_reuse_its_tensors():
    buf = KVDoubleBuffer()
    c = cache(1.0)
    buf.publish(c, ["a", "b"], [0.0, 0.0], 0.0)
    c.keys[0].fill_(99.0)
    with buf.read() as snap:
        assert float(snap.cache.keys[0].max()) == 1.0


def test_writer_waits_for_a_reader_still_holding_the_slot_it_would_overwrite():
    buf = KVDoubleBuffer()
    buf.publish(cache(1.0), ["a", "b"], [0, 0], 0)
    done = threading.Event()
    with buf.read() as held:
        buf.publish(cache(2.0), ["a", "b"], [0, 0], 0)  # other slot: no wait
        w = threading.Thread(target=lambda: (buf.publish(cache(3.0), ["a", "b"], [0, 0], 0), done.set()))
        w.start()
        w.join(0.3)
        assert not done.is_set(), "overwrote a slot a reader was using"
        assert float(held.cache.keys[0].max()) == 1.0 and held.version == 1
    w.join(10)
    assert done.is_set()
    with buf.read() as snap:
        assert snap.version == 3 and float(snap.cache.keys[0].max()) == 3.0


def test_shape_changes_reallocate_and_mismatched_ids_are_refused():
    buf = KVDoubleBuffer()
    buf.publish(cache(1.0, b=2), ["a", "b"], [0, 0], 0)
    buf.publish(cache(2.0, b=1, t=7), ["a"], [0], 0)
    buf.publish(cache(3.0, b=3), ["a", "b", "c"], [0, 0, 0], 0)
    with buf.read() as snap:
        assert snap.cache.batch_size == 3 and snap.cache.keys[0].shape[1] == 5
    with pytest.raises(ValueError, match="robot ids"):
        buf.publish(cache(1.0, b=2), ["a"], [0], 0)
