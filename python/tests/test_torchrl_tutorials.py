"""TorchRL's PPO tutorial (coding_ppo.py) and multi-agent PPO tutorial (multiagent_ppo.py,
adapted from VMAS navigation to mpe2.simple_spread_v3) as their code is written, shortened,
with shmenv's env in the env line.

coding_ppo: ``base_env = GymEnv("InvertedDoublePendulum-v4", device=device)`` becomes
``base_env = ShmEnv("InvertedDoublePendulum-v4", 8, num_workers=2, device=device)``. A
batched env (ShmEnv, like SerialEnv or ParallelEnv) needs one more change, in
``ObservationNorm.init_stats``: the statistics are reduced over the batch and time
dimensions (``reduce_dim=(0, 1), cat_dim=1``) instead of time only (``reduce_dim=0,
cat_dim=0``). The tutorial's loop is kept: an evaluation ``env.rollout(1000, policy)`` on the
training env between collector batches.

multiagent_ppo: ``VmasEnv(scenario="navigation", num_envs=..., continuous_actions=True,
max_steps=..., n_agents=3)`` becomes ``MultiAgentShmEnv("mpe2.simple_spread_v3", num_envs,
num_workers=2, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP, config={"N": 3, "max_cycles":
max_steps, "continuous_actions": True})`` (the group named "agents", as VMAS names it; the
PettingZoo env has no ``n_agents`` attribute, so the tutorial's ``env.n_agents`` reads
``n_agents``, and its ``env.action_spec.shape[-1]`` reads
``env.full_action_spec[env.action_key].shape[-1]``, as with ``PettingZooWrapper``, whose
``action_spec`` is the Composite of the group's actions).

Run as a script (``python tests/test_torchrl_tutorials.py [coding_ppo|multiagent_ppo]
[frames]``) for longer runs that print the figures docs/torchrl.md reports.

Needs torch and torchrl (and mujoco for coding_ppo, mpe2 for multiagent_ppo); skipped
without."""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run the TorchRL tests")

import torch  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from tensordict.nn.distributions import NormalParamExtractor  # noqa: E402
from torch import multiprocessing, nn  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.data.replay_buffers import ReplayBuffer  # noqa: E402
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement  # noqa: E402
from torchrl.data.replay_buffers.storages import LazyTensorStorage  # noqa: E402
from torchrl.envs import Compose, DoubleToFloat, ObservationNorm, RewardSum, StepCounter, TransformedEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType, MarlGroupMapType, check_env_specs, set_exploration_type  # noqa: E402
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal, ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss, ValueEstimators  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402


def coding_ppo(frames_per_batch: int = 1000, total_frames: int = 50_000, num_epochs: int = 10) -> dict:
    """coding_ppo.py's code (hyperparameters as arguments), ShmEnv in the env line."""
    from shmenv.torchrl import ShmEnv

    is_fork = multiprocessing.get_start_method() == "fork"
    device = torch.device(0) if torch.cuda.is_available() and not is_fork else torch.device("cpu")
    num_cells = 256
    lr = 3e-4
    max_grad_norm = 1.0
    sub_batch_size = 64
    clip_epsilon = 0.2
    gamma = 0.99
    lmbda = 0.95
    entropy_eps = 1e-4

    base_env = ShmEnv("InvertedDoublePendulum-v4", 8, num_workers=2, device=device)  # the env line
    env = TransformedEnv(
        base_env,
        Compose(ObservationNorm(in_keys=["observation"]), DoubleToFloat(), StepCounter()),
    )
    env.transform[0].init_stats(num_iter=1000, reduce_dim=(0, 1), cat_dim=1)  # batched: batch and time
    check_env_specs(env)
    env.rollout(3)

    actor_net = nn.Sequential(
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(2 * env.action_spec.shape[-1], device=device),
        NormalParamExtractor(),
    )
    policy_module = TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"])
    policy_module = ProbabilisticActor(
        module=policy_module,
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
        return_log_prob=True,
    )
    value_net = nn.Sequential(
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(num_cells, device=device),
        nn.Tanh(),
        nn.LazyLinear(1, device=device),
    )
    value_module = ValueOperator(module=value_net, in_keys=["observation"])
    policy_module(env.reset())
    value_module(env.reset())

    collector = Collector(
        env,
        policy_module,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        split_trajs=False,
        device=device,
    )
    replay_buffer = ReplayBuffer(
        storage=LazyTensorStorage(max_size=frames_per_batch), sampler=SamplerWithoutReplacement()
    )
    advantage_module = GAE(gamma=gamma, lmbda=lmbda, value_network=value_module, average_gae=True, device=device)
    loss_module = ClipPPOLoss(
        actor_network=policy_module,
        critic_network=value_module,
        clip_epsilon=clip_epsilon,
        entropy_bonus=bool(entropy_eps),
        entropy_coeff=entropy_eps,
        critic_coeff=1.0,
        loss_critic_type="smooth_l1",
    )
    optim = torch.optim.Adam(loss_module.parameters(), lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optim, total_frames // frames_per_batch, 0.0)

    logs = defaultdict(list)
    for i, tensordict_data in enumerate(collector):
        for _ in range(num_epochs):
            advantage_module(tensordict_data)
            data_view = tensordict_data.reshape(-1)
            replay_buffer.extend(data_view.cpu())
            for _ in range(frames_per_batch // sub_batch_size):
                subdata = replay_buffer.sample(sub_batch_size)
                loss_vals = loss_module(subdata.to(device))
                loss_value = loss_vals["loss_objective"] + loss_vals["loss_critic"] + loss_vals["loss_entropy"]
                loss_value.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), max_grad_norm)
                optim.step()
                optim.zero_grad()
        logs["reward"].append(tensordict_data["next", "reward"].mean().item())
        logs["step_count"].append(tensordict_data["step_count"].max().item())
        logs["lr"].append(optim.param_groups[0]["lr"])
        if i % 10 == 0:
            # the tutorial's evaluation, on the training env, between two collector batches
            with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
                eval_rollout = env.rollout(1000, policy_module)
                logs["eval reward"].append(eval_rollout["next", "reward"].mean().item())
                logs["eval reward (sum)"].append(eval_rollout["next", "reward"].sum().item())
                logs["eval step_count"].append(eval_rollout["step_count"].max().item())
                del eval_rollout
        scheduler.step()
    collector.shutdown()
    env.close()
    return logs


def multiagent_ppo(frames_per_batch: int = 6_000, n_iters: int = 5, num_epochs: int = 30) -> list:
    """multiagent_ppo.py's code (hyperparameters as arguments), adapted to
    mpe2.simple_spread_v3, MultiAgentShmEnv in the env line."""
    from shmenv.multiagent.torchrl import MultiAgentShmEnv

    is_fork = multiprocessing.get_start_method() == "fork"
    device = torch.device(0) if torch.cuda.is_available() and not is_fork else torch.device("cpu")
    total_frames = frames_per_batch * n_iters
    minibatch_size = min(400, frames_per_batch)
    lr = 3e-4
    max_grad_norm = 1.0
    clip_epsilon = 0.2
    gamma = 0.99
    lmbda = 0.9
    entropy_eps = 1e-4
    max_steps = 25
    num_envs = frames_per_batch // max_steps
    n_agents = 3

    env = MultiAgentShmEnv(  # the env line
        "mpe2.simple_spread_v3",
        num_envs,
        num_workers=2,
        device=device,
        group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
        config={"N": n_agents, "max_cycles": max_steps, "continuous_actions": True},
    )
    env = TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")]))
    check_env_specs(env)
    env.rollout(5)

    policy_net = torch.nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=env.observation_spec["agents", "observation"].shape[-1],
            n_agent_outputs=2 * env.full_action_spec[env.action_key].shape[-1],
            n_agents=n_agents,
            centralised=False,
            share_params=True,
            device=device,
            depth=2,
            num_cells=256,
            activation_class=torch.nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    policy_module = TensorDictModule(
        policy_net, in_keys=[("agents", "observation")], out_keys=[("agents", "loc"), ("agents", "scale")]
    )
    policy = ProbabilisticActor(
        module=policy_module,
        spec=env.action_spec_unbatched,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[env.action_key],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": env.full_action_spec_unbatched[env.action_key].space.low,
            "high": env.full_action_spec_unbatched[env.action_key].space.high,
        },
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=env.observation_spec["agents", "observation"].shape[-1],
        n_agent_outputs=1,
        n_agents=n_agents,
        centralised=True,
        share_params=True,
        device=device,
        depth=2,
        num_cells=256,
        activation_class=torch.nn.Tanh,
    )
    critic = TensorDictModule(
        module=critic_net, in_keys=[("agents", "observation")], out_keys=[("agents", "state_value")]
    )
    collector = Collector(
        env,
        policy,
        device=device,
        storing_device=device,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
    )
    replay_buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch, device=device),
        sampler=SamplerWithoutReplacement(),
        batch_size=minibatch_size,
    )
    loss_module = ClipPPOLoss(
        actor_network=policy,
        critic_network=critic,
        clip_epsilon=clip_epsilon,
        entropy_coeff=entropy_eps,
        normalize_advantage=False,
    )
    loss_module.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=gamma, lmbda=lmbda)
    value_estimator = loss_module.value_estimator
    optim = torch.optim.Adam(loss_module.parameters(), lr)

    episode_reward_mean_list = []
    for tensordict_data in collector:
        tensordict_data.set(
            ("next", "agents", "done"),
            tensordict_data.get(("next", "done"))
            .unsqueeze(-1)
            .expand(tensordict_data.get_item_shape(("next", env.reward_key))),
        )
        tensordict_data.set(
            ("next", "agents", "terminated"),
            tensordict_data.get(("next", "terminated"))
            .unsqueeze(-1)
            .expand(tensordict_data.get_item_shape(("next", env.reward_key))),
        )
        with torch.no_grad():
            value_estimator(
                tensordict_data,
                params=loss_module.critic_network_params,
                target_params=loss_module.target_critic_network_params,
            )
        data_view = tensordict_data.reshape(-1)
        replay_buffer.extend(data_view)
        for _ in range(num_epochs):
            for _ in range(frames_per_batch // minibatch_size):
                subdata = replay_buffer.sample()
                loss_vals = loss_module(subdata)
                loss_value = loss_vals["loss_objective"] + loss_vals["loss_critic"] + loss_vals["loss_entropy"]
                loss_value.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), max_grad_norm)
                optim.step()
                optim.zero_grad()
        collector.update_policy_weights_()
        done = tensordict_data.get(("next", "agents", "done"))
        episode_reward_mean = tensordict_data.get(("next", "agents", "episode_reward"))[done].mean().item()
        episode_reward_mean_list.append(episode_reward_mean)
    collector.shutdown()
    env.close()
    return episode_reward_mean_list


@pytest.mark.timeout(420)
def test_coding_ppo_with_shm_env_in_the_env_line():
    """Three collector batches with an evaluation rollout after the first: the tutorial runs
    through, its logs finite."""
    pytest.importorskip("mujoco", reason="mujoco is not installed: pip install gymnasium[mujoco]")
    logs = coding_ppo(frames_per_batch=256, total_frames=768, num_epochs=2)
    assert len(logs["reward"]) == 3 and len(logs["eval reward"]) == 1
    assert all(torch.isfinite(torch.tensor(v)).all() for v in logs.values())
    assert 1 <= logs["eval step_count"][0] <= 1000


@pytest.mark.timeout(420)
def test_multiagent_ppo_with_multi_agent_shm_env_in_the_env_line():
    """Two iterations of the multi-agent tutorial over simple_spread: it runs through, every
    episode ends within the batch (max_cycles 25), rewards finite."""
    pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    rewards = multiagent_ppo(frames_per_batch=400, n_iters=2, num_epochs=2)
    assert len(rewards) == 2 and all(torch.isfinite(torch.tensor(rewards)))


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "coding_ppo"
    frames = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if which == "coding_ppo":
        out = coding_ppo(total_frames=frames or 50_000)
        for key, values in out.items():
            print(key, [round(v, 3) for v in values])
    else:
        print("episode_reward_mean", [round(v, 3) for v in multiagent_ppo(n_iters=frames or 5)])
