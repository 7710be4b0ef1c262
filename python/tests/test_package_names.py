"""The names ``import shmenv`` offers: ``shmenv.__all__`` (written out, so that type
checkers read it) lists the pool's entry points and every class of ``shmenv.errors``, in
that module's order; each name resolves, the lazy ones on first use; and the import stays
light, as worker processes need it: no gymnasium until a lazy name is used. Also: an
``ActorDiedError`` survives pickling (its constructor's keywords all have defaults)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

import shmenv
import shmenv.errors

ENTRY_POINTS = ["make_vec", "from_fns", "ShmVectorEnv", "PoolOptions", "builtin_env_ids"]


@pytest.mark.timeout(60)
def test_all_lists_the_entry_points_and_every_error_class_in_order():
    assert shmenv.__all__ == ENTRY_POINTS + list(shmenv.errors.__all__)
    for name in shmenv.__all__:
        assert getattr(shmenv, name) is not None, name
    for name in shmenv.errors.__all__:
        assert getattr(shmenv, name) is getattr(shmenv.errors, name), name
    assert sorted(shmenv.__all__ + ["__version__"]) == dir(shmenv)


@pytest.mark.timeout(120)
def test_import_shmenv_does_not_import_gymnasium_until_a_lazy_name_is_used():
    code = (
        "import sys, shmenv\n"
        "assert 'gymnasium' not in sys.modules, 'import shmenv imported gymnasium'\n"
        "shmenv.ClosedError\n"
        "assert 'gymnasium' in sys.modules, 'ClosedError is a gymnasium ClosedEnvironmentError'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(60)
def test_an_actor_died_error_pickles_with_its_details():
    err = shmenv.ActorDiedError("actor 1 died", actor=1, actor_id="ab", node_id="n1", pid=7, env_ids=[3, 4], exit="x")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is shmenv.ActorDiedError and str(back) == "actor 1 died"
    assert (back.actor, back.worker, back.actor_id, back.node_id, back.pid, back.env_ids, back.exit) == (
        1, 1, "ab", "n1", 7, [3, 4], "x"
    )
