"""The ALE plugin (``examples/cpp/ale_atari.cpp``, built by ``examples/cpp/build_ale.sh``
from the installed ale-py's source distribution): its frames are ale-py's screens max-pooled
and resized exactly as ``cv2.resize(..., interpolation=cv2.INTER_AREA)``; with the same
seed and actions they equal EnvPool's ``Pong-v5`` (when EnvPool is installed); a pool plays
Pong to the end and resets; seeds are deterministic; bad config is refused with a message.
Other games and options (episodic life with reward clipping on Breakout, sticky actions on
Space Invaders) equal EnvPool's too. Skipped with the reason when ale-py, cv2, EnvPool or
the build tools are missing."""

from __future__ import annotations

import numpy as np
import pytest

import shmenv

pytestmark = pytest.mark.timeout(300)


def pong(n: int, library: str, roms: str, seed: int, workers: int = 1, **config):
    return shmenv.make_vec("PongC-v5", n, num_workers=workers, seed=seed, plugin=library,
                           config={"rom_dir": roms, **config})


def random_actions(steps: int, n: int, seed: int = 0, actions: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, actions, (steps, n))


def test_frames_are_ale_screens_max_pooled_and_area_resized_as_cv2(ale_plugin, ale_roms, no_leaks):
    cv2 = pytest.importorskip("cv2", reason="OpenCV is not installed (pip install opencv-python-headless)")
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(ale_py.roms.get_rom_path("pong"))
    ale.reset_game()
    ale.act(ale_py.Action.FIRE)  # fire reset; noop_max=1 draws no no-op
    actions = ale.getMinimalActionSet()

    def resized(gray: np.ndarray) -> np.ndarray:
        return cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA)

    with pong(1, ale_plugin, ale_roms, seed=0, noop_max=1) as envs:
        obs, _ = envs.reset()
        first = resized(ale.getScreenGrayscale())
        assert all((obs[0, k] == first).all() for k in range(4)), "the reset frame fills the stack"
        for t, (a,) in enumerate(random_actions(300, 1)):
            reward, frames = 0.0, []
            for _ in range(4):
                reward += ale.act(actions[a])
                frames.append(ale.getScreenGrayscale())
            obs, rew, term, _, _ = envs.step(np.array([a]))
            want = resized(np.maximum(frames[2], frames[3]))
            np.testing.assert_array_equal(obs[0, -1], want, err_msg=f"step {t}")
            assert rew[0] == reward and not term[0]


@pytest.mark.parametrize(
    ("game", "options", "steps"),
    [
        ("pong", {"noop_max": 1}, 400),
        ("pong", {}, 400),
        ("breakout", {"episodic_life": True, "reward_clip": True}, 1000),  # lives lost, games over
        ("space_invaders", {"repeat_action_probability": 0.25}, 300),  # sticky actions
        ("pong", {"frame_skip": 1, "stack_num": 2}, 200),  # EnvPool's max with the previous frame
        ("pong", {"frame_skip": 3, "img_height": 105, "img_width": 80}, 200),
    ],
)
def test_frames_equal_envpool(ale_plugin, ale_roms, game, options, steps):
    # (no leak check: EnvPool keeps an fd of its own open after the test)
    envpool = pytest.importorskip("envpool", reason="EnvPool is not installed (pip install envpool)")
    n, seed = 3, 5
    # Env i has seed + i in both; the no-op counts come from the same generator and seed.
    ref = envpool.make("".join(w.capitalize() for w in game.split("_")) + "-v5", env_type="gymnasium",
                       num_envs=n, batch_size=n, seed=seed, **options)
    config = {"rom_dir": ale_roms, "game": game, **options}
    with shmenv.make_vec("AtariC-v5", n, num_workers=2, seed=seed, plugin=ale_plugin, config=config) as envs:
        obs, info = envs.reset()
        want, w_info = ref.reset()
        np.testing.assert_array_equal(obs, want)
        np.testing.assert_array_equal(info["lives"], w_info["lives"])
        ends = 0
        for t, a in enumerate(random_actions(steps, n, 1, envs.single_action_space.n)):
            obs, rew, term, trunc, info = envs.step(a)
            w_obs, w_rew, w_term, w_trunc, w_info = ref.step(a)
            np.testing.assert_array_equal(obs, w_obs, err_msg=f"step {t}")
            np.testing.assert_array_equal(rew, w_rew, err_msg=f"step {t}")
            np.testing.assert_array_equal(term, w_term, err_msg=f"step {t}")
            np.testing.assert_array_equal(info["lives"], w_info["lives"], err_msg=f"step {t}: lives")
            np.testing.assert_array_equal(info["reward"], w_info["reward"], err_msg=f"step {t}: unclipped reward")
            ends += int(term.sum())
        if options.get("episodic_life"):
            assert ends > n, "the comparison crossed episode ends and the resets after them"


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_lives_come_in_infos_as_envpool_gives_them(ale_plugin, ale_roms, mode, no_leaks):
    n = 3
    config = {"rom_dir": ale_roms, "game": "breakout"}
    with shmenv.make_vec("AtariC-v5", n, num_workers=2, seed=2, plugin=ale_plugin, config=config,
                         autoreset_mode=mode) as envs:
        assert envs.single_observation_space.shape == (4, 84, 84), "lives is not part of the observation"
        obs, info = envs.reset()
        assert info["lives"].dtype == np.int32 and info["lives"].tolist() == [5] * n and info["_lives"].all()
        last, games = info["lives"].copy(), 0
        rng = np.random.default_rng(3)
        for _ in range(3000):
            obs, rew, term, trunc, info = envs.step(rng.integers(0, 4, n))
            # Unclipped rewards: the same as the rewards without reward_clip (a same-step
            # autoreset row's infos are its reset's; the last step's are under final_info).
            unclipped = info["reward"]
            if mode == "same_step" and term.any():
                unclipped = np.where(term, info["final_info"]["reward"], unclipped)
            np.testing.assert_array_equal(unclipped, rew)
            lives = info["lives"]
            for i in np.flatnonzero(~term):
                assert lives[i] in (last[i], last[i] - 1) or last[i] == 0, "lives only go down within a game"
            if term.any():
                games += int(term.sum())
                if mode == "same_step":  # the game's last step: no lives left; the row is the new game's
                    assert (info["final_info"]["lives"][term] == 0).all() and (lives[term] == 5).all()
                else:
                    assert (lives[term] == 0).all(), "a game ends with no lives left"
            last = lives.copy()
            if games >= 2:
                break
        assert games >= 2, "random play loses two games of Breakout in 3,000 steps"


def test_info_arrays_are_the_callers_with_observation_views(ale_plugin, ale_roms, no_leaks):
    # copy=False makes observations views of the region; lives is an observation array of
    # the engine's marked "info", and infos stay the caller's: owned, writable, own masks.
    config = {"rom_dir": ale_roms, "game": "breakout"}
    with shmenv.make_vec("AtariC-v5", 2, num_workers=1, seed=2, plugin=ale_plugin, config=config,
                         copy=False, autoreset_mode="same_step") as envs:
        obs, info = envs.reset()
        rng = np.random.default_rng(1)
        for _ in range(50):
            obs, _, term, trunc, info = envs.step(rng.integers(0, 4, 2))
            assert not obs.flags.writeable, "observations are views with copy=False"
            for key in ("lives", "_lives"):
                assert info[key].flags.writeable and info[key].flags.owndata, key
            assert info["_lives"] is not info["_reward"]
            info["lives"][:] = -1  # the caller's to change: the next step is unaffected
        assert (envs.step(np.zeros(2, np.int64))[4]["lives"] >= 0).all()


def test_pool_plays_pong_to_the_end_and_resets(ale_plugin, ale_roms, no_leaks):
    n = 4
    with pong(n, ale_plugin, ale_roms, seed=11, workers=2) as envs:
        assert envs.single_observation_space.shape == (4, 84, 84)
        assert envs.single_observation_space.dtype == np.uint8 and envs.single_action_space.n == 6
        obs, _ = envs.reset()
        returns, ended, after_end = np.zeros(n), [None] * n, [None] * n
        rng = np.random.default_rng(2)
        for _ in range(3000):
            obs, rew, term, trunc, _ = envs.step(rng.integers(0, 6, n))
            assert not trunc.any()
            for i in range(n):
                if ended[i] is not None and after_end[i] is None:
                    after_end[i] = obs[i].copy()  # next-step autoreset: the new game's first frames
                elif ended[i] is None:
                    returns[i] += rew[i]
                    if term[i]:
                        ended[i] = returns[i]
            if all(f is not None for f in after_end):
                break
        assert all(r is not None for r in ended), f"not every env finished a game: {ended}"
        # A game ends when one side has 21 points: the return is the agent's points minus 21, or 21 minus theirs.
        assert all(-21 <= r <= 21 and r != 0 for r in ended), ended
        for frames in after_end:
            assert all((frames[k] == frames[0]).all() for k in range(4)), "a new game's stack is its first frame"


def test_same_seed_same_frames_and_other_seed_other_noops(ale_plugin, ale_roms, no_leaks):
    actions = random_actions(60, 2, seed=3)

    def episode(envs, seed: int) -> np.ndarray:
        frames = [envs.reset(seed=seed)[0]]
        frames += [envs.step(a)[0] for a in actions]
        return np.stack(frames)

    with pong(2, ale_plugin, ale_roms, seed=7) as envs:
        first = episode(envs, 7)
        others = [episode(envs, seed) for seed in (8, 9)]
        again = episode(envs, 7)  # reseeded after other episodes: the same frames
    np.testing.assert_array_equal(first, again)
    with pong(2, ale_plugin, ale_roms, seed=7, workers=2) as envs:
        np.testing.assert_array_equal(first, episode(envs, 7))
    assert not all((other[1:] == first[1:]).all() for other in others), "no-op starts follow the seed"


def test_bad_config_is_refused_with_its_reason(ale_plugin, ale_roms, tmp_path, no_leaks):
    cases = [
        ({"rom_dir": ale_roms, "frame_skipp": 4}, 'unknown config key "frame_skipp"'),
        ({"rom_dir": str(tmp_path)}, "no ROM file .*pong.bin"),
        ({}, "needs the ROM"),
        ({"rom_dir": ale_roms, "stack_num": 0}, r'"stack_num" must be an integer in \[1, 64\]'),
        ({"rom_dir": ale_roms, "gray_scale": False}, "only true"),
        ({"rom_dir": ale_roms, "max_episode_steps": 10}, "time limits are the pool's"),
    ]
    for config, message in cases:
        with pytest.raises(shmenv.BuildError, match=message):
            shmenv.make_vec("PongC-v5", 1, num_workers=1, plugin=ale_plugin, config=config)
    with pytest.raises(shmenv.BuildError, match='AtariC-v5 needs config "game"'):
        shmenv.make_vec("AtariC-v5", 1, num_workers=1, plugin=ale_plugin, config={"rom_dir": ale_roms})
    with shmenv.make_vec("AtariC-v5", 1, num_workers=1, seed=0, plugin=ale_plugin,
                         config={"rom_dir": ale_roms, "game": "breakout", "episodic_life": True}) as envs:
        assert envs.single_action_space.n == 4
        obs, _ = envs.reset()
        assert obs.shape == (1, 4, 84, 84)
