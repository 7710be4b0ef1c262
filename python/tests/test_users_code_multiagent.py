"""Users' multi-agent code as PettingZoo teaches it: its Stable-Baselines3 tutorial for
Knights-Archers-Zombies (``tutorials/SB3/kaz/sb3_kaz_vector.py``) with shmenv's
agent-rows ``VecEnv`` in SuperSuit's two vectorization lines, shortened; and SuperSuit's
vectorization stepped beside it with the same seeds and actions. Run as a script, it times
both vectorizations in interleaved rounds (docs/multiagent.md has the figures)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KAZ_KWARGS = dict(max_cycles=100, max_zombies=4, obs_method="vector")


def _kaz_modules():
    """The tutorial's packages (the test is skipped, with the reason, without them)."""
    pytest.importorskip("stable_baselines3")
    ss = pytest.importorskip("supersuit")
    pytest.importorskip("pymunk", reason="pettingzoo[butterfly] (pygame, pymunk) is needed for KAZ")
    kaz = pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")
    return ss, kaz


# The tutorial's train() and eval(), as PettingZoo ships them (its verbose PPO quietened,
# n_steps shortened), with the two vectorization lines replaced by VECTORIZE.
TUTORIAL = """
import glob, os, sys, time
import supersuit as ss
from stable_baselines3 import PPO
from stable_baselines3.ppo import CnnPolicy, MlpPolicy
from pettingzoo.butterfly import knights_archers_zombies_v11
from shmenv.multiagent.sb3 import AgentRowsVecEnv


def train(env_fn, steps: int = 10_000, seed: int | None = 0, **env_kwargs):
    env = env_fn.parallel_env(**env_kwargs)
    env = ss.black_death_v3(env)
    visual_observation = not env.unwrapped.vector_state
    if visual_observation:
        env = ss.color_reduction_v0(env, mode="B")
        env = ss.resize_v1(env, x_size=84, y_size=84)
        env = ss.frame_stack_v1(env, 3)
    env.reset(seed=seed)
    print(f"Starting training on {str(env.metadata['name'])}.")
VECTORIZE
    model = PPO(CnnPolicy if visual_observation else MlpPolicy, env, verbose=0, batch_size=256, n_steps=32)
    model.learn(total_timesteps=steps)
    model.save(f"{env.unwrapped.metadata.get('name')}_{time.strftime('%Y%m%d-%H%M%S')}")
    print("Model has been saved.")
    print(f"Finished training on {str(env.unwrapped.metadata['name'])}.")
    env.close()


def eval(env_fn, num_games: int = 100, render_mode: str | None = None, **env_kwargs):
    env = env_fn.env(render_mode=render_mode, **env_kwargs)
    try:
        latest_policy = max(glob.glob(f"{env.metadata['name']}*.zip"), key=os.path.getctime)
    except ValueError:
        print("Policy not found.")
        exit(0)
    model = PPO.load(latest_policy)
    rewards = {agent: 0 for agent in env.possible_agents}
    for i in range(num_games):
        env.reset(seed=i)
        env.action_space(env.possible_agents[0]).seed(i)
        for agent in env.agent_iter():
            obs, reward, termination, truncation, info = env.last()
            for a in env.agents:
                rewards[a] += env.rewards[a]
            if termination or truncation:
                break
            else:
                if agent == env.possible_agents[0]:
                    act = env.action_space(agent).sample()
                else:
                    act = model.predict(obs, deterministic=True)[0]
            env.step(act)
    env.close()
    print("Full rewards: ", rewards)


if __name__ == "__main__":
    env_fn = knights_archers_zombies_v11
    env_kwargs = dict(max_cycles=100, max_zombies=4, obs_method="vector")
    train(env_fn, steps=int(sys.argv[1]), seed=0, **env_kwargs)
    eval(env_fn, num_games=2, render_mode=None, **env_kwargs)
"""

SUPERSUIT_LINES = """
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    env = ss.concat_vec_envs_v1(env, 8, num_cpus=1, base_class="stable_baselines3")
"""
SHMENV_LINES = """
    env = AgentRowsVecEnv(env, 8, num_workers=2)
"""


def tutorial(vectorize: str) -> str:
    """The tutorial's source with ``vectorize`` as its vectorization lines."""
    return TUTORIAL.replace("VECTORIZE", textwrap.indent(textwrap.dedent(vectorize).strip("\n"), "    "))


@pytest.mark.timeout(240)
def test_pettingzoo_sb3_kaz_tutorial_runs_with_agent_rows_vec_env(tmp_path, no_leaks):
    _kaz_modules()
    script = tmp_path / "sb3_kaz_vector.py"
    script.write_text(tutorial(SHMENV_LINES))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    done = subprocess.run(
        [sys.executable, str(script), "512"], cwd=tmp_path, capture_output=True, text=True, timeout=220, env=env
    )
    assert done.returncode == 0, f"the tutorial failed:\n{done.stdout}\n{done.stderr}"
    # The model is saved under the env's name (metadata["name"], as SuperSuit's VecEnv
    # gives it) and the evaluation finds it there.
    assert "Finished training on knights_archers_zombies_v11." in done.stdout
    assert list(tmp_path.glob("knights_archers_zombies_v11_*.zip")), done.stdout
    assert "Full rewards:" in done.stdout and "Policy not found" not in done.stdout


def _kaz_instance(ss, kaz):
    """The tutorial's env before its vectorization lines."""
    env = ss.black_death_v3(kaz.parallel_env(**KAZ_KWARGS))
    env.reset(seed=0)
    return env


@pytest.mark.timeout(240)
def test_agent_rows_vec_env_steps_kaz_as_supersuit_does(no_leaks):
    ss, kaz = _kaz_modules()
    from shmenv.multiagent.sb3 import AgentRowsVecEnv

    n = 3
    ref = ss.concat_vec_envs_v1(
        ss.pettingzoo_env_to_vec_env_v1(_kaz_instance(ss, kaz)), n, num_cpus=1, base_class="stable_baselines3"
    )
    venv = AgentRowsVecEnv(_kaz_instance(ss, kaz), n, num_workers=2)
    try:
        assert venv.num_envs == ref.num_envs == n * 4
        assert venv.observation_space == ref.observation_space and venv.action_space == ref.action_space
        assert venv.metadata["name"] == ref.unwrapped.metadata["name"] == "knights_archers_zombies_v11"
        # The same seeds: env i gets 7 + i in both.
        r_obs, _ = ref.venv.reset(seed=7)
        venv.seed(7)
        np.testing.assert_array_equal(venv.reset(), r_obs)
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(260):  # max_cycles=100: every env ends at least twice
            actions = rng.integers(0, 6, size=venv.num_envs)
            obs, rewards, dones, infos = venv.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            np.testing.assert_array_equal(obs, r_obs, err_msg=f"step {t}")
            np.testing.assert_array_equal(rewards, r_rewards, err_msg=f"step {t}")
            np.testing.assert_array_equal(dones, r_dones, err_msg=f"step {t}")
            for r in np.flatnonzero(r_dones):
                ended += 1
                np.testing.assert_array_equal(
                    infos[r]["terminal_observation"], r_infos[r]["terminal_observation"], err_msg=f"step {t} row {r}"
                )
        assert ended >= 2 * venv.num_envs
    finally:
        venv.close()
        ref.close()


@pytest.mark.timeout(60)
def test_agent_rows_vec_env_refuses_an_instance_that_does_not_pickle(no_leaks):
    pytest.importorskip("pettingzoo")
    import threading

    from pettingzoo.utils.env import ParallelEnv

    from shmenv.errors import InvalidArgumentError
    from shmenv.multiagent.sb3 import AgentRowsVecEnv

    class Holding(ParallelEnv):
        possible_agents = ["a"]

        def __init__(self):
            self.lock = threading.Lock()  # a lock does not pickle

    with pytest.raises(InvalidArgumentError, match=r"Holding instance that cannot be pickled.*pass a factory"):
        AgentRowsVecEnv(Holding(), 2, num_workers=1)


def _bench(rounds: int, steps: int, ppo_steps: int, num_workers: int) -> None:
    """Steps/s of both vectorizations of the tutorial's env, interleaved rounds: random
    actions through the SB3 ``VecEnv`` (rows and envs per second), and the tutorial's PPO
    ``learn`` (timesteps per second); prints each round and the medians."""
    import statistics
    import time

    import supersuit as ss
    from pettingzoo.butterfly import knights_archers_zombies_v11 as kaz
    from stable_baselines3 import PPO

    from shmenv.multiagent.sb3 import AgentRowsVecEnv

    def supersuit(env):
        env = ss.pettingzoo_env_to_vec_env_v1(env)
        return ss.concat_vec_envs_v1(env, 8, num_cpus=1, base_class="stable_baselines3")

    def agent_rows(env):
        return AgentRowsVecEnv(env, 8, num_workers=num_workers)

    results: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        for name, vectorize in (("SuperSuit", supersuit), ("AgentRowsVecEnv", agent_rows)):
            venv = vectorize(_kaz_instance(ss, kaz))
            rng = np.random.default_rng(r)
            venv.reset()
            t0 = time.perf_counter()
            for _ in range(steps):
                venv.step(rng.integers(0, 6, size=venv.num_envs))
            env_steps = steps * 8 / (time.perf_counter() - t0)
            model = PPO("MlpPolicy", venv, verbose=0, batch_size=256, n_steps=64)
            t0 = time.perf_counter()
            model.learn(total_timesteps=ppo_steps)
            learn = ppo_steps / (time.perf_counter() - t0)
            venv.close()
            got = results.setdefault(name, {"env-steps/s": [], "PPO timesteps/s": []})
            got["env-steps/s"].append(env_steps)
            got["PPO timesteps/s"].append(learn)
            print(f"round {r} {name}: {env_steps:,.0f} env-steps/s, {learn:,.0f} PPO timesteps/s", flush=True)
    for name, got in results.items():
        medians = ", ".join(f"{k} {statistics.median(v):,.0f}" for k, v in got.items())
        print(f"median {name}: {medians}")


if __name__ == "__main__":
    # python python/tests/test_users_code_multiagent.py [rounds] [steps] [ppo_steps] [workers]
    args = [int(a) for a in sys.argv[1:]]
    _bench(*(args + [5, 400, 8192, 2][len(args) :]))
