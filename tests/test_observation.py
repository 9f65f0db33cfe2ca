import numpy as np
import pytest

from spmlkit import protocol
from spmlkit.protocol import Observation

Y = np.array([[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 1]])


@pytest.mark.parametrize("text,expected", [
    ("single_positive", Observation("single_positive")),
    ("spml", Observation("single_positive")),
    ("pos=2,neg=-1", Observation("counts", num_pos=2, num_neg=-1)),
    ("ratio=0.3", Observation("ratio", ratio=0.3)),
    ("ratio=0.3,seed=5", Observation("ratio", ratio=0.3, seed=5)),
    ("full", Observation("full")),
])
def test_parse(text, expected):
    assert Observation.parse(text) == expected
    assert Observation.parse(str(expected)) == expected


def test_apply_uses_the_reference_generators():
    assert np.array_equal(Observation.parse("spml").apply(Y), protocol.observe_labels(Y, 1, 0, 1200))
    assert np.array_equal(Observation.parse("pos=2,neg=1").apply(Y), protocol.observe_labels(Y, 2, 1, 1200))
    assert np.array_equal(Observation.parse("ratio=0.5").apply(Y), protocol.observe_ratio(Y, 0.5, 0))
    assert np.array_equal(Observation.parse("full").apply(Y), 2 * Y - 1)


@pytest.mark.parametrize("bad", ["ratio=2", "pos=x", "half", "ratio=0"])
def test_bad_settings_are_explained(bad):
    with pytest.raises(ValueError, match="observation|ratio"):
        Observation.parse(bad)
