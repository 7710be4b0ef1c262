"""``Lab2dParallelEnv``: a DeepMind Lab2D game (``pip install dmlab2d``) as a PettingZoo
``ParallelEnv``, the shape MeltingPot gives its substrates: one agent per player
(``player_0`` ...), each with its own observations (``{"RGB": [88, 88, 3] uint8}`` in
``commons_harvest``), its own reward and its own discrete actions.

Its ``dmlab2d.Lab2d`` is a C++ object that does not pickle, so the env cannot be sent to a
worker process; hosted with a factory, each worker builds its own:

>>> import shmenv.multiagent
>>> from shmenv.multiagent.lab2d import Lab2dParallelEnv
>>> envs = shmenv.multiagent.make_vec(lambda: Lab2dParallelEnv("commons_harvest", num_players=4), 16)

- Observations: ``Dict`` of the player's observations named in ``observations`` (without
  the ``"<player>."`` prefix the level gives them: ``"RGB"``, ``"POSITION"``, ``"LAYER"``).
- Actions: the player's discrete actions (``commons_harvest``: ``move`` 0..4, ``turn``
  -1..1, ``zap`` 0..1) as one ``MultiDiscrete`` (with the levels' ``start``), or a
  ``Discrete`` when the level has one.
- Rewards: the player's ``REWARD`` observation at each step.
- Episodes: all players end together when the level ends (``TERMINATED``: terminations,
  ``INTERRUPTED``: truncations). ``reset(seed=s)`` starts the level with seed ``s mod 2**31``;
  ``reset()`` draws the next seed from a generator seeded by the last seed given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from gymnasium import spaces

from shmenv.errors import closed

if TYPE_CHECKING:
    # The type check runs without PettingZoo: it checks the env as the plain class it is then.
    _Base = object
else:
    try:
        from pettingzoo.utils.env import ParallelEnv as _Base
    except ImportError:  # pragma: no cover - PettingZoo-shaped without PettingZoo
        _Base = object

__all__ = ["Lab2dParallelEnv"]

_NP_DTYPES = {"uint8": np.uint8, "int32": np.int32, "float64": np.float64, "int64": np.int64, "float32": np.float32}


class Lab2dParallelEnv(_Base):
    """A dmlab2d level's players as PettingZoo agents; see the module docstring.
    ``settings`` are more of the level's settings (strings, as dmlab2d takes them)."""

    metadata = {"name": "lab2d", "render_modes": ["rgb_array"], "is_parallelizable": True}

    def __init__(
        self,
        level: str = "commons_harvest",
        num_players: int = 4,
        observations: Sequence[str] = ("RGB",),
        settings: dict[str, str] | None = None,
        render_mode: str | None = None,
    ):
        import dmlab2d
        from dmlab2d import runfiles_helper

        config = {"levelName": level, "numPlayers": str(int(num_players))}
        config.update({k: str(v) for k, v in (settings or {}).items()})
        self._dmlab2d = dmlab2d
        self._lab = dmlab2d.Lab2d(runfiles_helper.find(), config)
        self.render_mode = render_mode
        self.possible_agents = [f"player_{i}" for i in range(int(num_players))]
        self.agents: list[str] = []
        names = set(self._lab.observation_names())
        self._obs_names = list(observations)
        for i in range(1, int(num_players) + 1):
            missing = [f"{i}.{o}" for o in (*self._obs_names, "REWARD") if f"{i}.{o}" not in names]
            if missing:
                raise ValueError(
                    f"level {level!r} with {num_players} players has no observation {missing[0]!r}: its "
                    f"observations are {sorted(names)}"
                )
        self._action_names = list(self._lab.action_discrete_names())
        per_player = [n.split(".", 1)[1] for n in self._action_names if n.startswith("1.")]
        specs = [self._lab.action_discrete_spec(f"1.{a}") for a in per_player]
        low = np.array([s["min"] for s in specs], np.int64)
        high = np.array([s["max"] for s in specs], np.int64)
        self._per_player_actions = per_player
        self._action_space = (
            spaces.Discrete(int(high[0] - low[0] + 1), start=int(low[0]))
            if len(specs) == 1
            else spaces.MultiDiscrete(high - low + 1, start=low)
        )
        self._observation_space = spaces.Dict({o: self._obs_space(f"1.{o}") for o in self._obs_names})
        self._act = np.zeros(len(self._action_names), np.int32)
        self._slot = {
            (p, a): self._action_names.index(f"{p + 1}.{a}") for p in range(int(num_players)) for a in per_player
        }
        self._rng = np.random.default_rng()
        self._episode = 0

    def _level(self) -> Any:
        """The game (a ``dmlab2d.Lab2d``); a :class:`shmenv.ClosedError` once ``close()`` let it go."""
        if self._lab is None:
            raise closed("env")
        return self._lab

    def _obs_space(self, name: str) -> spaces.Space:
        spec = self._level().observation_spec(name)
        dtype = np.dtype(spec["dtype"])
        shape = tuple(int(d) for d in spec["shape"])
        if dtype == np.uint8:
            return spaces.Box(0, 255, shape, np.uint8)
        return spaces.Box(
            -np.inf if dtype.kind == "f" else np.iinfo(dtype).min,
            np.inf if dtype.kind == "f" else np.iinfo(dtype).max,
            shape,
            dtype,
        )

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def _observe(self, player: int) -> dict[str, np.ndarray]:
        lab = self._level()
        return {o: np.array(lab.observation(f"{player + 1}.{o}")) for o in self._obs_names}

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._level().start(episode=self._episode, seed=int(self._rng.integers(0, 2**31 - 1)))
        self._episode += 1
        self.agents = list(self.possible_agents)
        return {a: self._observe(i) for i, a in enumerate(self.possible_agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        self._act[:] = 0
        for p, agent in enumerate(self.possible_agents):
            if agent not in actions:
                continue
            values = np.atleast_1d(np.asarray(actions[agent]))
            for a, value in zip(self._per_player_actions, values):
                self._act[self._slot[(p, a)]] = value
        lab = self._level()
        lab.act_discrete(self._act)
        status, _ = lab.advance()
        live = list(self.agents)
        observations = {a: self._observe(self.possible_agents.index(a)) for a in live}
        rewards = {a: float(lab.observation(f"{self.possible_agents.index(a) + 1}.REWARD")) for a in live}
        over = status != self._dmlab2d.RUNNING
        terms = {a: over and status == self._dmlab2d.TERMINATED for a in live}
        truncs = {a: over and status != self._dmlab2d.TERMINATED for a in live}
        if over:
            self.agents = []
        return observations, rewards, terms, truncs, {a: {} for a in live}

    def render(self) -> np.ndarray | None:
        """The whole world (``WORLD.RGB``) for ``render_mode="rgb_array"``."""
        return np.array(self._level().observation("WORLD.RGB")) if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self._lab = None
