"""Errors map to shmenv.errors with the engine's messages; killed workers are reported;
nothing is left behind after close(), after an interpreter exits without close(), or after
Ctrl-C during a wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import alive, wait_gone

import shmenv


def test_unknown_env_id_lists_the_registered_ids(no_leaks):
    with pytest.raises(shmenv.UnknownEnvError) as e:
        shmenv.make_vec("CartPole-v2", 2, num_workers=1)
    assert "CartPole-v1" in str(e.value) and "Pendulum-v1" in str(e.value)
    assert e.value.env_id == "CartPole-v2"
    assert e.value.closest == "CartPole-v1"
    assert "CartPole-v1" in e.value.registered
    assert isinstance(e.value, ValueError)


def test_bad_config_key_names_the_key(no_leaks):
    with pytest.raises(shmenv.ConfigError, match="gravity"):
        shmenv.make_vec("Pendulum-v1", 2, num_workers=1, config={"gravity": 9.8})


def test_unserialisable_config_is_refused_before_any_worker_starts(no_leaks):
    with pytest.raises(shmenv.InvalidArgumentError, match=r"config\['g'\] is not JSON-serialisable"):
        shmenv.make_vec("Pendulum-v1", 2, num_workers=1, config={"g": object()})


def test_bad_arguments(no_leaks):
    with pytest.raises(shmenv.InvalidArgumentError, match="num_workers"):
        shmenv.make_vec("CartPole-v1", 2, num_workers=3)
    with pytest.raises(shmenv.InvalidArgumentError, match="autoreset_mode"):
        shmenv.make_vec("CartPole-v1", 2, autoreset_mode="sometimes")


def test_bad_action_names_the_env_and_leaves_the_pool_usable(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0) as envs:
        envs.reset()
        with pytest.raises(shmenv.ActionError, match=r"env 2") as e:
            envs.step(np.array([0, 1, 5, 0]))
        assert isinstance(e.value, ValueError)
        assert "Discrete(2)" in str(e.value)
        with pytest.raises(shmenv.ActionError, match="4"):
            envs.step(np.array([0, 1, 1]))
        with pytest.raises(shmenv.ActionError, match="integers"):
            envs.step(np.array([0.5, 1, 1, 0]))
        envs.step(np.array([0, 1, 1, 0]))  # still fine


def test_step_before_reset_and_wrong_mode(no_leaks):
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as envs:
        with pytest.raises(shmenv.UsageError, match="reset"):
            envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(shmenv.UsageError, match="sync"):
            envs.recv()


def test_killed_worker_is_reported_then_the_pool_is_closed(no_leaks):
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0)
    envs.reset()
    victim = envs.worker_pids[1]
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(shmenv.WorkerDiedError) as e:
        for _ in range(1000):
            envs.step(np.zeros(4, dtype=np.int64))
    err = e.value
    assert (err.worker, err.pid, err.env_ids) == (1, victim, [2, 3])
    assert err.exit.startswith("killed by signal 9")
    assert "killed by signal 9" in str(err)
    with pytest.raises(shmenv.ClosedError):
        envs.step(np.zeros(4, dtype=np.int64))
    envs.close()
    assert not wait_gone(envs.worker_pids)


def test_env_panic_is_a_worker_error(no_leaks):
    config = {"fault": "panic", "fault_step": 3}
    with shmenv.make_vec("Burn-v0", 4, num_workers=2, seed=0, config=config) as envs:
        envs.reset()
        with pytest.raises(shmenv.WorkerError, match="fault injected at step 3") as e:
            for _ in range(10):
                envs.step(np.zeros(4, dtype=np.int64))
        assert e.value.env_id in range(4)


def test_close_stops_every_worker_and_is_idempotent(no_leaks):
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2)
    pids = envs.worker_pids
    assert all(alive(p) for p in pids)
    envs.close()
    envs.close()
    assert not [p for p in pids if alive(p)]
    with pytest.raises(shmenv.ClosedError):
        envs._pool.step(np.zeros(4, dtype=np.int64))


def test_many_pools_leave_nothing_behind(no_leaks):
    for _ in range(10):
        with shmenv.make_vec("CartPole-v1", 2, num_workers=2) as envs:
            envs.reset()
            envs.step(np.zeros(2, dtype=np.int64))


def run_script(body: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_interpreter_exit_without_close_leaves_no_worker():
    proc = run_script(
        """
        import numpy as np, shmenv
        envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2)
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        print(*envs.worker_pids, flush=True)
        # no close(): the interpreter exits with the pool alive
        """
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pids = [int(p) for p in out.split()]
    assert len(pids) == 2
    assert not wait_gone(pids), f"workers outlived the trainer: {pids}"


def test_killed_trainer_takes_its_workers_along():
    proc = run_script(
        """
        import time, shmenv
        envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2)
        envs.reset()
        print(*envs.worker_pids, flush=True)
        time.sleep(60)
        """
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.kill()
    proc.wait(timeout=10)
    assert not wait_gone(pids, timeout=2.0), f"workers outlived the killed trainer: {pids}"


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_promptly():
    proc = run_script(
        """
        import signal, sys, time, numpy as np, shmenv
        # A test suite started in the background by a non-interactive shell inherits SIGINT
        # ignored, and so would this process: Ctrl-C must be Python's to raise.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        envs = shmenv.make_vec("Burn-v0", 2, num_workers=2, config={"step_us": 60_000_000})
        envs.reset()
        print(*envs.worker_pids, flush=True)
        try:
            envs.step(np.zeros(2, dtype=np.int64))  # 60 s of work per env
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            sys.exit(0)
        print("step returned", flush=True)
        """
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    time.sleep(0.5)  # inside the step's wait
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        # Say where every thread of the trainer and its workers was before failing (how
        # the inherited SIG_IGN above was found: the trainer slept normally, never told).
        where = {pid: _threads_state(pid) for pid in [proc.pid, *pids]}
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"Ctrl-C not honoured in 50 s; threads (state, wchan): {where}; stdout {out!r}; stderr {err!r}")
    took = time.monotonic() - sent
    # Honoured within the 50 s above, before the step could end: its 60 s are of CPU time
    # (Burn-v0 burns CPU, not wall time), which no machine gives a worker in less than 60 s
    # of wall time, however busy. So the wait gave up.
    assert "KeyboardInterrupt" in out, f"Ctrl-C honoured after {took:.1f} s without a KeyboardInterrupt: {(out, err)}"
    assert not wait_gone(pids), f"workers left behind after Ctrl-C: {pids}"


def _threads_state(pid: int) -> dict[int, tuple[str, str]]:
    """Each thread of ``pid``: its scheduler state and the kernel function it waits in."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                out[int(tid)] = (state, f.read())
    except OSError as e:
        out[-1] = ("gone", str(e))
    return out


def test_a_hung_env_times_out_with_the_envs_named(no_leaks):
    config = {"fault": "hang", "fault_step": 2, "fault_seed": 11}
    envs = shmenv.make_vec("Burn-v0", 4, num_workers=2, seed=10, config=config, step_timeout=1.0)
    pids = envs.worker_pids
    envs.reset()
    envs.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(shmenv.WorkerTimeoutError) as e:
        envs.step(np.zeros(4, dtype=np.int64))
    assert e.value.workers == [0] and e.value.env_ids == [0, 1]
    assert isinstance(e.value, TimeoutError) and "step timeout" in str(e.value)
    assert not wait_gone(pids)
    envs.close()


def test_a_crashed_worker_reports_its_last_output(no_leaks):
    config = {"fault": "abort", "fault_step": 2, "fault_seed": 1}
    with shmenv.make_vec("Burn-v0", 2, num_workers=2, seed=0, config=config) as envs:
        envs.reset()
        envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(shmenv.WorkerDiedError) as e:
            envs.step(np.zeros(2, dtype=np.int64))
    assert e.value.worker == 1 and e.value.exit.startswith("killed by signal 6")
    assert "Burn-v0: fault abort injected at step 2 (seed 1)" in e.value.output
    assert "its last output" in str(e.value)


def test_restart_policy_carries_on_after_a_kill(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0, max_restarts=1) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        victim = envs.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        assert not wait_gone([victim])
        obs, rewards, term, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert infos["restarted_envs"] == [2, 3]
        assert trunc[2] and trunc[3] and rewards[2] == 0
        assert envs.restarts == [0, 1] and envs.worker_pids[1] != victim
        envs.step(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "shmenv.bench.envs:BurnEnv"])
def test_restart_policy_in_async_mode(no_leaks, env_id):
    with shmenv.make_vec(env_id, 6, num_workers=2, batch_size=3, seed=0, max_restarts=1) as envs:
        obs, infos = envs.reset()
        ids = infos["env_id"]
        victim = envs.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        assert not wait_gone([victim])
        seen = []
        for _ in range(50):
            obs, rewards, term, trunc, infos = envs.step(np.zeros(len(ids), dtype=np.int64), ids)
            ids = infos["env_id"]
            for e in infos.get("restarted_envs", []):
                row = list(ids).index(e)
                assert trunc[row] and rewards[row] == 0
                seen.append(e)
        assert sorted(seen) == [3, 4, 5]
        assert envs.restarts == [0, 1] and envs.worker_pids[1] != victim
