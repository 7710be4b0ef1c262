"""shmenv.torchrl.ShmEnv in TorchRL's Collector: one pool call per batched step (the resets
of ended envs come with the step, same-step auto-reset), and batches equal to
SerialEnv(n, GymEnv)'s tensor for tensor, episode ends inside the batches included; with a
TransformedEnv (TorchRL's own reset path) and with a '_reset' mask that mixes envs the step
reset and running envs.

The pool's calls are counted by the pool itself (``stats()["batches"]``: every step and
reset call it served). Needs torch and torchrl; skipped without."""

from __future__ import annotations

import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run the TorchRL tests")
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv  # noqa: E402

from shmenv.torchrl import ShmEnv  # noqa: E402
from test_torchrl_users import serial_env_seeds  # noqa: E402

N = 4
STEPS = 32  # steps per collector batch: random-length CartPole episodes end inside each


def lean_policy(td):
    """A deterministic CartPole policy of the observation: the same observations give the
    same actions in both envs, and episodes of many lengths (10 to 60 steps)."""
    obs = td["observation"]
    push = (obs[..., 2] > 0) ^ (obs[..., 0] > 0.02)
    td.set("action", torch.nn.functional.one_hot(push.long(), 2).bool())
    return td


def _gym_cartpole():
    return GymEnv("CartPole-v1")


def collect(env, batches: int, calls=None, *, policy=lean_policy, steps: int = STEPS, between=None):
    """``batches`` collector batches of ``num_envs * steps`` frames (cloned), and for each
    the number of pool calls made while it was collected (``calls()``, when given);
    ``between(env)`` runs after each batch (an evaluation rollout), outside the count."""
    frames = int(env.batch_size.numel()) * steps
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames * (batches + 1))
    out: list = []
    counts: list[int] = []
    before = calls() if calls else 0
    for batch in collector:
        out.append(batch.clone())
        if calls:
            counts.append(calls() - before)
        if between is not None:
            between(env)
        before = calls() if calls else 0
        if len(out) == batches:
            break
    collector.shutdown()
    return out, counts


def assert_batches_equal(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.batch_size == y.batch_size == torch.Size([N, STEPS])
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in x.keys(True, True):
            assert x[key].dtype == y[key].dtype, key
            assert torch.equal(x[key], y[key]), key


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env_id", ["CartPole-v1", gym.spec("CartPole-v1")], ids=["native", "gymnasium"])
def test_collector_batches_equal_serial_env_with_one_pool_call_per_step(env_id):
    ref = SerialEnv(N, _gym_cartpole)
    try:
        ref.set_seed(123)
        expected, _ = collect(ref, 4)
    finally:
        ref.close(raise_if_closed=False)
    env = ShmEnv(env_id, N, num_workers=2)
    env.reset(seed=serial_env_seeds(123, N))
    pool = env.pool
    got, calls = collect(env, 4, lambda: pool.stats()["batches"])
    env.close()
    assert_batches_equal(expected, got)
    # Episodes ended inside every batch (not only at its end), each followed by a reset...
    for batch in got:
        assert batch["next", "done"][:, :-1].sum() >= 2
    # ...and the pool served one call per batched step: the resets came with the steps.
    assert calls == [STEPS] * 4


@pytest.mark.timeout(180)
def test_a_pool_without_autoreset_pays_a_reset_call_per_step_with_an_end():
    """The same collection with autoreset_mode='disabled': the same batches, and one more
    pool call (a partial reset) after every step where an episode ended."""
    batches = {}
    for mode in ("same_step", "disabled"):
        env = ShmEnv("CartPole-v1", N, num_workers=2, autoreset_mode=mode)
        env.reset(seed=7)
        pool = env.pool
        batches[mode], calls = collect(env, 3, lambda: pool.stats()["batches"])
        env.close()
        steps_with_an_end = [int(b["next", "done"].reshape(N, STEPS).any(0).sum()) for b in batches[mode]]
        assert min(steps_with_an_end) > 0
        expected = [STEPS] * 3 if mode == "same_step" else [STEPS + k for k in steps_with_an_end]
        assert calls == expected, (mode, calls, steps_with_an_end)
    assert_batches_equal(batches["same_step"], batches["disabled"])


@pytest.mark.timeout(180)
def test_transformed_env_collector_equals_serial_env():
    """Under a TransformedEnv, TorchRL resets ended envs through ShmEnv's '_reset' with a
    mask (its generic maybe_reset): answered from the kept reset observations, still one
    pool call per step, and the batches (with StepCounter's step_count) equal SerialEnv's."""
    ref = TransformedEnv(SerialEnv(N, _gym_cartpole), StepCounter())
    try:
        ref.set_seed(123)
        expected, _ = collect(ref, 3)
    finally:
        ref.close(raise_if_closed=False)
    base = ShmEnv("CartPole-v1", N, num_workers=2)
    base.reset(seed=serial_env_seeds(123, N))
    pool = base.pool
    got, calls = collect(TransformedEnv(base, StepCounter()), 3, lambda: pool.stats()["batches"])
    base.close()
    assert_batches_equal(expected, got)
    assert calls == [STEPS] * 3


@pytest.mark.timeout(120)
def test_reset_mask_mixing_ended_and_running_envs():
    """A '_reset' mask over envs the last step ended (answered from the kept observations)
    and running envs (a partial reset of the pool): the same observations as a pool without
    auto-reset gives, and the envs step on alike."""
    results = []
    for mode in ("same_step", "disabled"):
        with ShmEnv("CartPole-v1", N, num_workers=2, autoreset_mode=mode, seed=3) as env:
            td = env.reset()
            for _ in range(200):
                out = env.step(lean_policy(td))["next"]
                done = out["done"].reshape(N)
                if done.any() and not done.all():
                    break
                td = out.clone()
            assert done.any() and not done.all()
            mask = done.clone()
            mask[int(np.flatnonzero(~done.numpy())[0])] = True  # and one running env
            reset = env.reset(out.clone().set("_reset", mask.view(N, 1)))
            after = env.step(lean_policy(reset.clone()))["next"]
            results.append((done, reset["observation"], after["observation"]))
    (done_a, reset_a, after_a), (done_b, reset_b, after_b) = results
    assert torch.equal(done_a, done_b)
    assert torch.equal(reset_a, reset_b)
    assert torch.equal(after_a, after_b)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rows", [[True, False, True, False], [True] * N], ids=["partial", "every_env"])
def test_folded_reset_equals_torchrl_update(rows):
    """ShmEnv's update of a step_mdp tensordict by the kept reset observations equals
    TorchRL's own (_update_during_reset, as maybe_reset applies it), with the action and a
    policy output in the tensordict: partial resets zero the other keys' reset rows, a reset
    of every env leaves them."""
    from shmenv.libs.torchrl_parts import _torchrl_fold, fold_resets

    with ShmEnv("CartPole-v1", N, num_workers=1, seed=0) as env:
        td = lean_policy(env.reset())
        td.set("policy_out", torch.arange(N * 3, dtype=torch.float32).view(N, 3) + 1)
        td.set(("collector", "traj_ids"), torch.arange(N) + 1)  # nested, as the collector's
        stepped = env.step(td)
        mask = torch.tensor(rows)
        for key in ("done", "terminated"):
            stepped["next"].set(key, mask.view(N, 1).clone())
        step_mdp = env._step_mdp(stepped)
        reset_obs = {"observation": torch.randn(N, 4)}
        ours = fold_resets(env, step_mdp.clone(), reset_obs, mask)
        theirs = _torchrl_fold(env, step_mdp.clone(), reset_obs, mask)
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    assert set(ours.keys(True, True)) >= {"action", "policy_out", "observation", ("collector", "traj_ids")}
    for key in theirs.keys(True, True):
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
    assert not ours["done"].any() and not ours["terminated"].any()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, N])
def test_reset_after_close_starts_the_new_pool_afresh(n):
    """A ShmEnv closed (as a Collector closes it) while envs ended in its last step holds
    reset observations of the old pool: its next reset builds a new pool and resets every
    env there, as a new ShmEnv with the same arguments does (with one env, every env of the
    pool had ended)."""
    with ShmEnv("CartPole-v1", n, num_workers=1, seed=11) as fresh:
        expected = fresh.reset()["observation"]
    env = ShmEnv("CartPole-v1", n, num_workers=1, seed=11)
    td = env.reset()
    for _ in range(500):
        td = env.step(lean_policy(td))["next"]
        if td["done"].any():
            break
    assert td["done"].any()
    env.close()
    got = env.reset()["observation"]
    env.close()
    assert torch.equal(got, expected)


class _DictCartPole(gym.ObservationWrapper):
    """CartPole with a Dict observation: the state, and the cart position twice over (a
    second key of another shape)."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        box = self.env.observation_space
        self.observation_space = gym.spaces.Dict(
            {"state": box, "x": gym.spaces.Box(-5.0, 5.0, shape=(2,), dtype=np.float32)}
        )

    def observation(self, observation):
        return {"state": observation, "x": np.array([observation[0]] * 2, dtype=np.float32)}


def _replaying(actions):
    """A policy that sets the next of ``actions`` (an iterator)."""

    def policy(td):
        return td.set("action", next(actions))

    return policy


@pytest.mark.timeout(120)
def test_dict_observation_rollout_equals_gym_wrapper():
    """A Dict observation (not flat: the reset rows are folded in by TorchRL's own update):
    a 150-step rollout through episode ends equals GymWrapper(SyncVectorEnv)'s, one pool
    call per step."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from torchrl.envs import GymWrapper

    ref = GymWrapper(SyncVectorEnv([_DictCartPole] * N, autoreset_mode=AutoresetMode.DISABLED))
    out = []
    for env in (ref, ShmEnv(_DictCartPole, N, num_workers=2)):
        torch.manual_seed(0)
        actions = iter([env.action_spec.rand() for _ in range(150)])
        env.set_seed(5)
        before = env.pool.stats()["batches"] if isinstance(env, ShmEnv) else 0
        td = env.rollout(150, _replaying(actions), break_when_any_done=False)
        if isinstance(env, ShmEnv):
            assert env.pool.stats()["batches"] - before == 150 + 1  # the rollout's reset, then its steps
        out.append(td)
        env.close()
    a, b = out
    assert a["next", "done"].sum() >= N
    assert set(a.keys(True, True)) == set(b.keys(True, True)) >= {"observation", "x"}
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key
