"""shmenv.multiagent.torchrl.MultiAgentShmEnv in TorchRL's Collector: one pool call per
batched step (the pool resets ended envs in the step, same-step autoreset, and TorchRL's
reset of them is answered from the observations and ``active`` flags it kept), and batches
equal, tensor for tensor, to those of the reset-call path (``autoreset_mode="disabled"``)
and of ``SerialEnv(n, PettingZooWrapper)``, with episode ends inside the batches: walkers
that leave at seeded random steps (episodes of 2 to 7 steps, ending at different steps in
different envs), the same with per-agent Dict observations holding an action mask, and
MPE's simple_spread (every env ends at once).

The pool's calls are counted by the pool itself (``stats()["batches"]``: every step and
reset call it served). Needs torch, torchrl and pettingzoo (mpe2 for simple_spread);
skipped without.

Run as a script it measures a Collector's frames/s over MultiAgentShmEnv with same-step
autoreset against the reset-call path, rounds interleaved::

    python python/tests/test_torchrl_multiagent_collector.py --envs 16 --seconds 3 --rounds 3
"""

from __future__ import annotations

import functools
import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run these tests")
pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import SerialEnv  # noqa: E402
from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402

import conftest  # noqa: E402,F401 - puts the fixtures package on sys.path when run as a script
from shmenv.multiagent.torchrl import MultiAgentShmEnv  # noqa: E402
from shmenv_fixtures.multiagent import Leaving  # noqa: E402
from test_torchrl_collector import collect as collect_batches  # noqa: E402
from test_torchrl_users import serial_env_seeds  # noqa: E402

N = 4
STEPS = 24  # steps per collector batch: the walkers' 2-7 step episodes end inside each


def varied_leaving_factory(action_mask: bool = False):
    """A factory of ``Leaving`` envs whose walkers' lifetimes are drawn at every reset from
    the env's seeded generator (so episodes end at different steps in different envs, and
    agents leave at different steps); with ``action_mask`` each walker's observation is a
    Dict of its observation and an ``"action_mask"`` (action 2 allowed at even steps).
    Made inside a function so that cloudpickle sends it by value to the workers (the test
    module is not imported there)."""

    def make(strict: bool = True):
        class VariedLeaving(Leaving):
            def reset(self, seed=None, options=None):
                out = super().reset(seed=seed, options=options)
                self.lifetimes = dict(zip(self.possible_agents, (int(x) for x in self._rng.integers(1, 8, 3))))
                self.lifetimes["walker_2"] = max(self.lifetimes["walker_2"], 2)
                return out

            if action_mask:

                def observation_space(self, agent):
                    return spaces.Dict(
                        {
                            "observation": spaces.Box(-100.0, 100.0, (3,), np.float32),
                            "action_mask": spaces.MultiBinary(3),
                        }
                    )

                def _obs(self, agent):
                    mask = np.array([1, 1, self._steps % 2 == 0], np.int8)
                    return {"observation": super()._obs(agent), "action_mask": mask}

        return VariedLeaving(strict=strict)

    return make


def masked_walker_policy(td):
    """``walker_policy`` over the Dict observations of ``varied_leaving_factory(True)``
    (TorchRL's layout: ``("walker", "observation", "observation")``, and the mask moved to
    ``("walker", "action_mask")``); a masked action 2 of an agent in the env (its
    ``"mask"``: gone agents' masks differ between wrappers, their actions are ignored)
    becomes 0."""
    obs = td["walker", "observation", "observation"]
    action = (obs[..., 0] + obs[..., 1] + obs[..., 2]).long().remainder(3)
    allowed = td["walker", "action_mask"].gather(-1, action.unsqueeze(-1)).squeeze(-1) | ~td["walker", "mask"]
    td.set(("walker", "action"), torch.where(allowed, action, torch.zeros_like(action)))
    return td


def walker_policy(td):
    """A deterministic policy of the walkers' observations (position, steps, index): the
    same observations give the same actions in every env."""
    obs = td["walker", "observation"]
    td.set(("walker", "action"), (obs[..., 0] + obs[..., 1] + obs[..., 2]).long().remainder(3))
    return td


def spread_policy(td):
    """A deterministic policy of simple_spread's observations (actions 0..4)."""
    obs = td["agent", "observation"]
    td.set(("agent", "action"), (obs[..., 2] > 0).long() * 2 + (obs[..., 3] > 0).long())
    return td


def _spread_make():
    spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    return functools.partial(spread.parallel_env, N=3, max_cycles=6)


#: name -> (factory, group, policy, MultiAgentShmEnv keywords)
CASES = {
    "walkers": (varied_leaving_factory, "walker", walker_policy, {"use_mask": True}),
    "masked_walkers": (
        functools.partial(varied_leaving_factory, True),
        "walker",
        masked_walker_policy,
        {"use_mask": True},
    ),
    "spread": (_spread_make, "agent", spread_policy, {}),
}


def _wrapper(env, **kwargs) -> PettingZooWrapper:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchRL warns that it was tested with another PettingZoo
        return PettingZooWrapper(env, **kwargs)


def collect(env, policy, batches: int, calls=None, between=None) -> tuple[list, list[int]]:
    """``test_torchrl_collector.collect`` with this file's policy and batch length."""
    return collect_batches(env, batches, calls, policy=policy, steps=STEPS, between=between)


def assert_batches_equal(a: list, b: list, keys=None) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.batch_size == y.batch_size == torch.Size([N, STEPS])
        if keys is None:
            assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in keys or x.keys(True, True):
            assert x[key].dtype == y[key].dtype, key
            assert torch.equal(x[key], y[key]), key


MODES = {"same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}


def _ours(case: str, mode: str, **kwargs) -> MultiAgentShmEnv:
    factory, _, _, options = CASES[case]
    return MultiAgentShmEnv(factory(), N, num_workers=2, autoreset_mode=mode, **options, **kwargs)


def _pool_calls(env: MultiAgentShmEnv):
    return lambda: env.envs.stats()["batches"]


def _steps_with_an_end(batch) -> int:
    return int(batch["next", "done"].reshape(N, STEPS).any(0).sum())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_pool_call_per_step_and_the_reset_call_paths_batches(case, no_leaks, monkeypatch):
    """The same collection with same-step autoreset (the default) and with
    autoreset_mode='disabled' (TorchRL's resets as partial resets of the pool): equal
    batches; one pool call per step against one more per step with an episode end. Under
    same-step autoreset the wrapper's fold updates the tensordicts (TorchRL's maybe_reset
    is not called)."""
    policy = CASES[case][2]
    batches, calls = {}, {}

    def refused(self, tensordict):
        raise AssertionError("TorchRL's maybe_reset was called: the fold did not take the tensordict")

    for mode in ("same_step", "disabled"):
        env = _ours(case, mode)
        assert env.envs.autoreset_mode == MODES[mode]
        env.reset(seed=7)
        with monkeypatch.context() as patch:
            if mode == "same_step":
                patch.setattr(MultiAgentShmEnv, "maybe_reset", refused)
            batches[mode], calls[mode] = collect(env, policy, 3, _pool_calls(env))
        env.close()
    ends = [_steps_with_an_end(b) for b in batches["same_step"]]
    assert min(ends) > 0
    for batch in batches["same_step"]:  # episode ends inside every batch, not only at its end
        assert batch["next", "done"][:, :-1].sum() >= 2
    if case != "spread":  # ...some of them in a step where other envs went on (partial resets)
        done = torch.cat([b["next", "done"].reshape(N, STEPS) for b in batches["same_step"]], 1)
        assert ((done.sum(0) > 0) & (done.sum(0) < N)).sum() >= 5
    assert calls["same_step"] == [STEPS] * 3
    assert calls["disabled"] == [STEPS + k for k in ends]
    assert_batches_equal(batches["same_step"], batches["disabled"])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(CASES))
def test_batches_equal_serial_pettingzoo_wrapper(case, no_leaks):
    """SerialEnv(N, PettingZooWrapper) seeded with set_seed(123), and MultiAgentShmEnv reset
    with the seeds of TorchRL's seed chain: equal collector batches, tensor for tensor, every
    key but the agents' infos (the wrapper's own). For the walkers the per-agent and the
    "next" root terminated/truncated flags are left out: an agent that left keeps the flag
    it ended with where the wrapper sets both, and the root truncated is set when one walker
    was truncated where the wrapper's all() leaves both root flags False (differences
    documented in docs/multiagent.md; the done flags are compared). With Dict observations
    the action_mask is left out too: for agents not in the env the wrapper gives every
    action allowed, MultiAgentShmEnv the agent's last mask (the step it left) or zeros
    (the reset-call path gives the same, checked above)."""
    factory, group, policy, options = CASES[case]
    make = factory()
    kwargs = dict(options, done_on_any=False)
    ref = SerialEnv(N, lambda: _wrapper(make(strict=False) if case != "spread" else make(), **kwargs))
    try:
        ref.set_seed(123)
        expected, _ = collect(ref, policy, 2)
    finally:
        ref.close(raise_if_closed=False)
    env = _ours(case, "same_step")
    env.reset(seed=serial_env_seeds(123, N))
    got, calls = collect(env, policy, 2, _pool_calls(env))
    env.close()
    assert calls == [STEPS] * 2
    ours, theirs = set(got[0].keys(True, True)), set(expected[0].keys(True, True))
    assert ours <= theirs and all("info" in k for k in theirs - ours)  # the wrapper adds the agents' infos
    keys = sorted(ours, key=str)
    left_out = {"walkers": ("terminated", "truncated"), "masked_walkers": ("terminated", "truncated", "action_mask")}
    keys = [k for k in keys if isinstance(k, str) or k[-1] not in left_out.get(case, ())]
    assert len(keys) == len(ours) - {"walkers": 6, "masked_walkers": 8}.get(case, 0)
    assert_batches_equal(expected, got, keys)
    assert sum(_steps_with_an_end(b) for b in got) >= 2


@pytest.mark.timeout(120)
def test_active_flags_of_ended_envs(no_leaks):
    """Step by step through episode ends: an ended env's step output holds the ended
    step's active mask (every walker gone), the next observation (after TorchRL's reset,
    answered from the kept rows) the next episode's (every walker in), as with
    autoreset_mode='disabled' and PettingZooWrapper; and MultiAgentVectorEnv's
    infos["final_active"] holds the ended step's flags while infos["active"] holds the next
    episode's."""
    steps = 30
    runs = {}
    for mode in ("same_step", "disabled"):
        with _ours("walkers", mode) as env:
            env.set_seed(40)
            td = env.reset()
            outs, nexts = [], []
            for _ in range(steps):
                out, td = env.step_and_maybe_reset(walker_policy(td))
                outs.append(out.clone())
                nexts.append(td.clone())
            runs[mode] = (torch.stack(outs, 1), torch.stack(nexts, 1))
    (stepped_all, nxt), (stepped_ref, nxt_ref) = runs["same_step"], runs["disabled"]
    assert set(stepped_all.keys(True, True)) == set(stepped_ref.keys(True, True))
    for key in stepped_ref.keys(True, True):
        assert torch.equal(stepped_all[key], stepped_ref[key]), key
    assert set(nxt.keys(True, True)) == set(nxt_ref.keys(True, True))
    for key in nxt_ref.keys(True, True):
        assert torch.equal(nxt[key], nxt_ref[key]), key
    out = stepped_all["next"]
    done = out["done"].squeeze(-1)
    mask = out["walker", "mask"]
    assert done.sum() >= 8 and (done.sum(0) == 1).any()  # ends, some in only one env of the step
    assert not mask[done].any()  # the ended step: every walker gone
    assert nxt["walker", "mask"][done].all()  # the next episode's first observation: every walker in
    assert not nxt["walker", "done"][done].any()
    assert (~mask[~done]).any() and mask[~done].any()  # envs going on: some walkers left, others in
    # Against PettingZooWrapper, env by env (seeds 40 + i, the same actions).
    for i in range(N):
        ref = _wrapper(varied_leaving_factory()(strict=False), use_mask=True, done_on_any=False)
        ref.set_seed(40 + i)
        td = ref.reset()
        for t in range(steps):
            td.set(("walker", "action"), stepped_all[i, t]["walker", "action"])
            stepped, td = ref.step_and_maybe_reset(td)
            for key in (("walker", "mask"), ("walker", "observation"), ("walker", "done"), "done"):
                assert torch.equal(stepped["next"].get(key), out[i, t].get(key)), (i, t, key)
                assert torch.equal(td.get(key), nxt[i, t].get(key)), (i, t, key)
        ref.close()


@pytest.mark.timeout(120)
def test_final_active_in_the_vector_env(no_leaks):
    """MultiAgentVectorEnv under same-step autoreset: an ended env's row holds the next
    episode's first observation and active flags, infos["final_active"] the ended step's
    (as the disabled pool's step returns them), other rows the same in both."""
    from shmenv.multiagent import make_vec

    make = varied_leaving_factory()
    pools = {mode: make_vec(make, N, num_workers=1, seed=5, autoreset_mode=mode) for mode in ("same_step", "disabled")}
    try:
        for pool in pools.values():
            pool.reset()
        ended_steps = 0
        for t in range(25):
            actions = np.full((N, 3), t % 3, np.int64)
            s_obs, s_rew, s_term, s_trunc, s_infos = pools["same_step"].step(actions)
            d_obs, d_rew, d_term, d_trunc, d_infos = pools["disabled"].step(actions)
            ended = d_infos["env_terminated"] | d_infos["env_truncated"]
            np.testing.assert_array_equal(s_rew, d_rew)
            np.testing.assert_array_equal(s_term, d_term)
            np.testing.assert_array_equal(s_trunc, d_trunc)
            if not ended.any():
                assert "final_active" not in s_infos
                np.testing.assert_array_equal(s_obs, d_obs)
                np.testing.assert_array_equal(s_infos["active"], d_infos["active"])
                continue
            ended_steps += 1
            np.testing.assert_array_equal(s_infos["final_active"], d_infos["active"])
            assert not s_infos["final_active"][ended].any()
            for i in np.flatnonzero(ended):
                np.testing.assert_array_equal(s_infos["final_obs"][i], d_obs[i])
            r_obs, r_infos = pools["disabled"].reset(options={"reset_mask": ended})
            np.testing.assert_array_equal(s_obs, r_obs)
            np.testing.assert_array_equal(s_infos["active"], r_infos["active"])
            assert s_infos["active"][ended].all()
        assert ended_steps >= 3
    finally:
        for pool in pools.values():
            pool.close()


@pytest.mark.timeout(120)
def test_reset_mask_mixing_ended_and_running_envs(no_leaks):
    """A '_reset' mask over envs the last step ended (answered from the kept rows) and a
    running env (a partial reset of the pool): the same tensors as the disabled mode's, and
    the envs step on alike."""
    results = []
    for mode in ("same_step", "disabled"):
        with _ours("walkers", mode) as env:
            env.set_seed(3)
            td = env.reset()
            for _ in range(60):
                out = env.step(walker_policy(td))["next"]
                done = out["done"].reshape(N)
                if done.any() and not done.all():
                    break
                td = out.clone() if not done.any() else env.reset()
            assert done.any() and not done.all()
            mask = done.clone()
            mask[int(np.flatnonzero(~done.numpy())[0])] = True  # and one running env
            reset = env.reset(out.clone().set("_reset", mask.view(N, 1)))
            after = env.step(walker_policy(reset.clone()))["next"]
            results.append((done, reset, after))
    (done_a, reset_a, after_a), (done_b, reset_b, after_b) = results
    assert torch.equal(done_a, done_b)
    for a, b in ((reset_a, reset_b), (after_a, after_b)):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), key


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rows", [[True, False, True, False], [True] * N], ids=["partial", "every_env"])
def test_fold_of_the_kept_rows_equals_torchrl_maybe_reset(rows, no_leaks):
    """MultiAgentShmEnv's update of step_mdp's tensordict by the kept rows equals TorchRL's
    maybe_reset answered by the same rows (its _update_during_reset), with the actions, a
    policy output, a per-agent extra entry and the collector's nested trajectory ids in the
    tensordict: a partial reset zeroes the other entries' reset rows, a reset of every env
    leaves them; the done flags, the root's and the group's, are cleared."""
    with _ours("walkers", "same_step", seed=0) as env:
        td = walker_policy(env.reset())
        td.set("policy_out", torch.arange(N * 3, dtype=torch.float32).view(N, 3) + 1)
        td.set(("walker", "logits"), torch.rand(N, 3, 3) + 1)
        td.set(("collector", "traj_ids"), torch.arange(N) + 1)
        stepped = env.step(td)
        mask = torch.tensor(rows)
        for key in ("done", "terminated"):
            stepped["next"].set(key, mask.view(N, 1).clone())
        stepped["next"].set(("walker", "done"), torch.ones(N, 3, 1, dtype=torch.bool))
        step_mdp = env._step_mdp(stepped)
        generator = torch.Generator().manual_seed(1)
        kept = {
            "walker": {
                "observation": torch.rand(N, 3, 3, generator=generator) + 10,
                "mask": torch.rand(N, 3, generator=generator) > 0.5,
            }
        }
        env._ep.reset_obs, env._ep.fresh = kept, mask.numpy().copy()
        ours = step_mdp.clone()
        assert env._fold_kept(ours, mask)
        theirs = env.maybe_reset(step_mdp.clone())  # TorchRL's path: _reset answers from the kept rows
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    assert set(ours.keys(True, True)) >= {
        ("walker", "action"),
        ("walker", "logits"),
        "policy_out",
        ("collector", "traj_ids"),
        ("walker", "observation"),
        ("walker", "mask"),
    }
    for key in theirs.keys(True, True):
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
    assert not ours["done"].any() if all(rows) else not ours["done"][mask].any()
    assert not ours["walker", "done"][mask].any()


@pytest.mark.timeout(180)
def test_evaluation_rollouts_between_batches_equal_the_reset_call_path(no_leaks):
    """An evaluation rollout after each batch stops at the first env done and leaves it
    done; the collector's next step starts it from a reset (the kept one under same-step
    autoreset, a partial reset of the pool when disabled): equal batches in both modes."""
    batches = {}
    for mode in ("same_step", "disabled"):
        env = _ours("walkers", mode)
        env.reset(seed=11)
        evaluations = []

        def evaluate(e, evaluations=evaluations):
            evaluations.append(e.rollout(50, walker_policy))

        batches[mode], _ = collect(env, walker_policy, 3, between=evaluate)
        env.close()
        assert all(ev["next", "done"][:, -1].any() for ev in evaluations)
        batches[mode + " evaluations"] = evaluations
    assert_batches_equal(batches["same_step"], batches["disabled"])
    for a, b in zip(batches["same_step evaluations"], batches["disabled evaluations"]):
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), key


@pytest.mark.timeout(120)
def test_the_opt_out_is_kept_and_next_step_is_refused(no_leaks):
    """autoreset_mode='disabled' survives pickling (the copy builds a disabled pool);
    'next_step' is refused before any worker starts."""
    with pytest.raises(ValueError, match="same_step"):
        _ours("walkers", "next_step")
    env = _ours("walkers", "disabled", seed=2)
    first = env.reset()["walker", "observation"].clone()
    copy = pickle.loads(pickle.dumps(env))
    try:
        assert copy.envs.autoreset_mode == AutoresetMode.DISABLED
        assert torch.equal(copy.reset()["walker", "observation"], first)
        td = copy.rollout(12, walker_policy, break_when_any_done=False)
        assert td["next", "done"].any()
    finally:
        copy.close()
        env.close()


def _frames_per_second(mode: str, make, num_envs: int, workers: int, seconds: float) -> float:
    """A random-policy Collector over MultiAgentShmEnv for ``seconds`` (after one warm-up
    batch): env frames per second."""
    import time

    env = MultiAgentShmEnv(make, num_envs, num_workers=workers, seed=0, autoreset_mode=mode)
    collector = Collector(env, None, frames_per_batch=num_envs * 25, total_frames=-1)
    try:
        frames, start = 0, None
        for batch in collector:
            if start is None:
                start = time.perf_counter()
                continue
            frames += batch.numel()
            if time.perf_counter() - start >= seconds:
                break
        assert start is not None
        return frames / (time.perf_counter() - start)
    finally:
        collector.shutdown()
        env.close()


def main(argv: list[str] | None = None) -> None:
    """Collector frames/s with same-step autoreset against the reset-call path
    (autoreset_mode='disabled'), rounds interleaved, medians printed."""
    import argparse
    import os
    import statistics

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--env", choices=["spread", "walkers"], default="spread")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    if args.env == "spread":
        import mpe2.simple_spread_v3 as spread

        make = functools.partial(spread.parallel_env, N=3, max_cycles=25)
    else:
        make = varied_leaving_factory()
    print(
        f"{args.env}, {args.envs} envs, {args.workers} workers, {args.seconds:g} s x {args.rounds} rounds; "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    rates: dict[str, list[float]] = {"disabled": [], "same_step": []}
    for _ in range(args.rounds):
        for mode in rates:
            rates[mode].append(_frames_per_second(mode, make, args.envs, args.workers, args.seconds))
    for mode, values in rates.items():
        print(f"{mode:>9}: median {statistics.median(values):,.0f} frames/s ({', '.join(f'{v:,.0f}' for v in values)})")
    ratio = statistics.median(rates["same_step"]) / statistics.median(rates["disabled"])
    print(f"same_step / disabled: {ratio:.3f}; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
