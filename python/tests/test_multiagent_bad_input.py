"""shmenv.multiagent refuses agent data that does not fit PettingZoo's parallel API, with
typed errors that name the agent, and follows the API where an env leaves something
implicit: agents that are not in ``possible_agents`` (in ``env.agents`` or keys of the
step's rewards, terminations, truncations), observations of the wrong shape, duplicate
``possible_agents``, ``group_map`` keys that collide as strings, and agents that leave
``env.agents`` without a flag (they count as terminated).

The envs are real PettingZoo ``ParallelEnv``s hosted in real worker processes (the workers
import this module by the inherited ``sys.path``). Needs pettingzoo (skipped without)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

from gymnasium import spaces  # noqa: E402
from pettingzoo.utils.env import ParallelEnv  # noqa: E402

import shmenv  # noqa: E402
import shmenv.multiagent as ma  # noqa: E402
from conftest import wait_gone  # noqa: E402

AGENTS = ("a_0", "a_1", "a_2")


class Quad(ParallelEnv):
    """Three agents seeing 4 numbers each, Discrete(2) actions, reward 4 per agent and step,
    every agent truncated at step ``length``. ``fault`` makes it misbehave at step ``at``
    (0: in ``reset``), in env ``bad_env`` only (the env whose seed is ``bad_env``; None:
    every env):

    - ``"agents"``: ``env.agents`` gets ``"ghost"``, which is not in ``possible_agents``;
    - ``"rewards"``, ``"terminations"``, ``"truncations"``: that dict gets a ``"ghost"`` key;
    - ``"common"``: the observations and infos get a ``"common"`` key (PettingZoo allows it);
    - ``"vanish"``: ``a_0`` leaves ``env.agents`` and is in none of the step's dicts;
    - ``"vanish_unflagged"``: ``a_0`` leaves ``env.agents`` with both flags False;
    - ``"vanish_all"``: every agent leaves ``env.agents``, all flags False;
    - ``"scalar"``: ``a_1``'s observation is a scalar instead of a ``(4,)`` array.
    """

    metadata = {"name": "quad_v0", "render_modes": []}

    def __init__(self, fault: str | None = None, at: int = 1, bad_env: int | None = None, length: int = 3,
                 agents: tuple = AGENTS):
        self.possible_agents = list(agents)
        self.fault, self.at, self.bad_env, self.length = fault, at, bad_env, length
        self.agents: list = []
        self._seed: int | None = None
        self._t = 0

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(-100.0, 100.0, (4,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self, agent) -> np.ndarray:
        return np.full(4, self._t + self.possible_agents.index(agent), np.float32)

    def _faulty(self) -> bool:
        return self._t == self.at and (self.bad_env is None or self._seed == self.bad_env)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._seed = seed
        self._t = 0
        self.agents = list(self.possible_agents)
        obs, infos = {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}
        if self._faulty() and self.fault == "agents":
            self.agents.append("ghost")
        return obs, infos

    def step(self, actions):
        self._t += 1
        live = [a for a in self.agents if a in self.possible_agents]
        obs = {a: self._obs(a) for a in live}
        rewards = {a: 4.0 for a in live}
        terms = {a: False for a in live}
        truncs = {a: self._t >= self.length for a in live}
        infos = {a: {} for a in live}
        self.agents = [a for a in live if not truncs[a]]
        if self._faulty():
            self._misbehave(obs, rewards, terms, truncs, infos)
        return obs, rewards, terms, truncs, infos

    def _misbehave(self, obs, rewards, terms, truncs, infos) -> None:
        fault = self.fault
        if fault == "agents":
            self.agents.append("ghost")
        elif fault in ("rewards", "terminations", "truncations"):
            {"rewards": rewards, "terminations": terms, "truncations": truncs}[fault]["ghost"] = (
                4000.0 if fault == "rewards" else False
            )
        elif fault == "common":
            obs["common"], infos["common"] = np.arange(7), {"steps_per_second": 1.0}
        elif fault in ("vanish", "vanish_unflagged"):
            self.agents.remove("a_0")
            if fault == "vanish":
                for values in (obs, rewards, terms, truncs, infos):
                    del values["a_0"]
        elif fault == "vanish_all":
            self.agents = []
        elif fault == "scalar":
            obs["a_1"] = np.float32(1.0)


def _quad(**kwargs) -> functools.partial:
    return functools.partial(Quad, **kwargs)


def _closed_and_gone(envs) -> None:
    """A failed step closes the pool, as any env failure does, and stops its workers."""
    pids = envs.worker_pids
    with pytest.raises(shmenv.ClosedError):
        envs.step(np.zeros((envs.num_envs, 3), np.int64))
    envs.close()
    assert wait_gone(pids) == []


def _check_unknown(err: Exception, where: str) -> None:
    text = str(err)
    assert isinstance(err, ma.AgentDataError) and isinstance(err, shmenv.WorkerError), type(err)
    assert isinstance(err, ValueError)
    assert "'ghost'" in text and where in text, text
    assert "possible_agents ['a_0', 'a_1', 'a_2']" in text, text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["terminations", "truncations", "rewards", "agents"])
def test_an_agent_not_in_possible_agents_in_a_step_is_refused(where, no_leaks):
    envs = ma.make_vec(_quad(fault=where, at=2, bad_env=1), 2, num_workers=2, seed=0)
    try:
        envs.reset()
        envs.step(np.zeros((2, 3), np.int64))
        with pytest.raises(ma.AgentDataError) as caught:
            envs.step(np.zeros((2, 3), np.int64))
        _check_unknown(caught.value, where)
        assert caught.value.env_id == 1  # the env that returned it, not its neighbour
        _closed_and_gone(envs)
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_an_agent_not_in_possible_agents_after_reset_is_refused(no_leaks):
    envs = ma.make_vec(_quad(fault="agents", at=0), 2, num_workers=1, seed=0)
    try:
        with pytest.raises(ma.AgentDataError) as caught:
            envs.reset()
        _check_unknown(caught.value, "agents")
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_an_unknown_reward_is_not_added_to_the_team_return(no_leaks):
    # Before, the 4000 of "ghost" went into episode_stats (r=4012 over 12 of per-agent rewards).
    with ma.make_agent_vec(_quad(fault="rewards", at=1), 1, num_workers=1, seed=0) as rows:
        rows.reset()
        with pytest.raises(ma.AgentDataError, match="rewards"):
            for _ in range(3):
                rows.step(np.zeros(3, np.int64))


@pytest.mark.timeout(120)
def test_common_keys_in_observations_and_infos_are_ignored_as_pettingzoo_allows(no_leaks):
    # PettingZoo's parallel_api_test lets observations and infos hold other keys ("common").
    with ma.make_vec(_quad(fault="common", at=1), 2, num_workers=1, seed=0, agent_infos=True) as envs:
        envs.reset()
        obs, rewards, terms, truncs, infos = envs.step(np.zeros((2, 3), np.int64))
        assert obs.shape == (2, 3, 4) and (obs[:, 1] == 2).all()
        np.testing.assert_array_equal(rewards, 4.0)
        for _ in range(2):
            _, _, _, truncs, infos = envs.step(np.zeros((2, 3), np.int64))
        assert truncs.all() and (infos["episode_stats"]["r"] == 36).all()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["vanish", "vanish_unflagged"])
def test_an_agent_that_leaves_without_a_flag_is_terminated(fault, no_leaks):
    with ma.make_vec(_quad(fault=fault, at=1), 2, num_workers=1, seed=0) as envs:
        envs.reset()
        _, rewards, terms, truncs, infos = envs.step(np.zeros((2, 3), np.int64))
        assert terms.tolist() == [[True, False, False]] * 2 and not truncs.any()
        assert infos["active"].tolist() == [[False, True, True]] * 2
        if fault == "vanish":
            np.testing.assert_array_equal(rewards, [[0, 4, 4]] * 2)
        envs.step(np.zeros((2, 3), np.int64))
        _, _, terms, truncs, infos = envs.step(np.zeros((2, 3), np.int64))
        # a_0 ended by termination, the others by truncation: the env's episode is truncated
        assert truncs.tolist() == [[False, True, True]] * 2 and not terms.any()
        assert infos["env_truncated"].all() and not infos["env_terminated"].any()


@pytest.mark.timeout(120)
def test_all_agents_leaving_without_flags_terminate_the_env_and_each_agent(no_leaks):
    with ma.make_vec(_quad(fault="vanish_all", at=2), 2, num_workers=1, seed=0) as envs:
        envs.reset()
        envs.step(np.zeros((2, 3), np.int64))
        _, _, terms, truncs, infos = envs.step(np.zeros((2, 3), np.int64))
        assert infos["env_terminated"].all() and not infos["env_truncated"].any()
        assert terms.all() and not truncs.any()  # env_terminated with every agent's flag 0 before
        assert infos["_episode_stats"].all() and (infos["episode_stats"]["l"] == 2).all()


@pytest.mark.timeout(120)
def test_agent_rows_of_agents_that_leave_without_flags_are_done(no_leaks):
    with ma.make_agent_vec(_quad(fault="vanish", at=1), 2, num_workers=1, seed=0) as rows:
        rows.reset()
        _, _, terms, truncs, infos = rows.step(np.zeros(6, np.int64))
        assert terms.tolist() == [True, False, False] * 2 and not truncs.any()
        rows.step(np.zeros(6, np.int64))
        _, _, terms, truncs, infos = rows.step(np.zeros(6, np.int64))
        # the env's end: every row done, each as its agent ended
        assert (terms | truncs).all()
        assert terms.tolist() == [True, False, False] * 2 and truncs.tolist() == [False, True, True] * 2


@pytest.mark.timeout(120)
def test_a_scalar_observation_for_a_shaped_space_is_refused(no_leaks):
    envs = ma.make_vec(_quad(fault="scalar", at=1), 2, num_workers=1, seed=0)
    try:
        envs.reset()
        with pytest.raises(ma.AgentDataError) as caught:
            envs.step(np.zeros((2, 3), np.int64))
        text = str(caught.value)
        assert "'a_1'" in text and "shape ()" in text and "(4,)" in text, text
        _closed_and_gone(envs)
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_duplicate_possible_agents_are_refused_at_build(no_leaks):
    with pytest.raises(ma.DuplicateAgentsError) as caught:
        ma.make_vec(_quad(agents=("a_0", "a_1", "a_0")), 1, num_workers=1)
    err = caught.value
    assert isinstance(err, shmenv.BuildError) and isinstance(err, ValueError)
    assert "'a_0'" in str(err) and "possible_agents" in str(err), str(err)


@pytest.mark.timeout(60)
def test_group_map_keys_that_collide_as_strings_are_refused_naming_both(no_leaks):
    with pytest.raises(shmenv.InvalidArgumentError) as caught:
        ma.make_vec(_quad(), 1, num_workers=1, group_map={1: ["a_0"], "1": ["a_1", "a_2"]})
    text = str(caught.value)
    assert "1 and '1'" in text and "no group" not in text, text
