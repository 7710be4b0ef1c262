"""Gymnasium spaces over the engine's fixed-size arrays.

- :mod:`~shmenv.spaces.convert`: spaces as the engine's spec JSON and back (including
  :class:`UniformBox`, a Box of one lower and one upper bound), and each space's dtype;
- :mod:`~shmenv.spaces.composite`: nested Dict/Tuple observations as the engine's flat
  arrays, Dict/Tuple actions packed into one byte row per env;
- :mod:`~shmenv.spaces.assembly`: the trainer's side, the engine's arrays to observations
  of the env's space and a batch of actions to the engine's action array.
"""

from __future__ import annotations

from shmenv.spaces.convert import UniformBox, dtype_of, observation_space, space_from_json, space_to_json

__all__ = ["UniformBox", "dtype_of", "observation_space", "space_from_json", "space_to_json"]
