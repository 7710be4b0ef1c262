"""The spec JSON's defaults (the keys a space's JSON form may leave out) are the
engine's: ``_shmenv.canonical_space`` fills them in, and :mod:`shmenv.spaces.convert`
asks it instead of restating them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces

from shmenv import _shmenv
from shmenv.spaces import dtype_of, space_from_json

# Hand-written JSON leaving keys out, and the space it means.
CASES = [
    ({"type": "MultiDiscrete", "nvec": [3, 4]}, spaces.MultiDiscrete([3, 4])),
    ({"type": "MultiDiscrete", "nvec": [5], "shape": [2, 2]}, spaces.MultiDiscrete(np.full((2, 2), 5))),
    ({"type": "MultiDiscrete", "nvec": [3, 4], "start": [], "shape": []}, spaces.MultiDiscrete([3, 4])),
    ({"type": "MultiDiscrete", "nvec": [4], "dtype": "i8"}, spaces.MultiDiscrete([4], dtype=np.int8)),
    ({"type": "MultiDiscrete", "nvec": [2], "shape": [100], "start": [-1]},
     spaces.MultiDiscrete(np.full(100, 2), start=np.full(100, -1))),
    ({"type": "MultiBinary", "n": 6}, spaces.MultiBinary(6)),
    ({"type": "MultiBinary", "n": 6, "shape": [2, 3]}, spaces.MultiBinary([2, 3])),
]


def canonical(s: dict) -> dict:
    return json.loads(_shmenv.canonical_space(json.dumps(s)))


@pytest.mark.parametrize("s,want", CASES)
def test_omitted_keys_mean_what_the_engine_fills_in(s, want):
    full = canonical(s)
    assert all(full.get(k) not in (None, []) for k in ("shape", "start", "dtype") if k in full)
    assert space_from_json(s) == space_from_json(full) == want
    assert dtype_of(s) == dtype_of(full) == want.dtype


def test_the_engine_fills_in_every_default_its_json_form_has():
    assert canonical({"type": "MultiDiscrete", "nvec": [3, 4]}) == {
        "type": "MultiDiscrete", "nvec": [3, 4], "start": [0, 0], "shape": [2], "dtype": "i64"}
    assert canonical({"type": "MultiBinary", "n": 5}) == {"type": "MultiBinary", "n": 5, "shape": [5]}


def test_a_space_the_engine_refuses_says_why():
    with pytest.raises(ValueError, match="nvec"):
        _shmenv.canonical_space(json.dumps({"type": "MultiDiscrete", "nvec": [0]}))
    with pytest.raises(ValueError, match="bad space JSON"):
        _shmenv.canonical_space("{")
