"""The message of a pool whose envs' spaces do not compare equal names two different envs,
and says when the cause is a custom ``Space`` class without ``__eq__`` (its instances
compare by identity: even env 0's space and its copy differ) and what to do. Real worker
processes check the spaces, as ``AsyncVectorEnv``'s do."""

from __future__ import annotations

import re
from functools import partial

import pytest

import shmenv
from shmenv_fixtures.no_eq import CustomSpaceEnv

pytestmark = pytest.mark.timeout(120)

ENTRY = "shmenv_fixtures.no_eq:CustomSpaceEnv"
NO_EQ = (
    "The spaces differ only because NoEqSpace does not define __eq__, so its instances compare by identity and no "
    "two envs' {what} spaces (nor a space and its copy) are ever equal"
)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_custom_space_without_eq_is_named_with_two_different_envs_and_the_fix(num_workers, no_leaks):
    with pytest.raises(RuntimeError) as caught:
        shmenv.make_vec(ENTRY, 3, num_workers=num_workers, config={"space": "no_eq"})
    text = str(caught.value)
    assert "Env 1 has NoEqSpace(4), env 0 has NoEqSpace(4)." in text
    assert "Env 0 has NoEqSpace(4), env 0 has" not in text
    assert NO_EQ.format(what="observation") in text
    assert "Define __eq__ on NoEqSpace" in text
    assert "observation_mode='different'" not in text  # no answer to a missing __eq__


def test_a_custom_space_without_eq_inside_a_dict_and_as_action(no_leaks):
    with pytest.raises(RuntimeError, match=re.escape(NO_EQ.format(what="observation"))):
        shmenv.make_vec(ENTRY, 2, num_workers=2, config={"space": "dict_no_eq"})
    with pytest.raises(RuntimeError) as caught:
        shmenv.make_vec(ENTRY, 2, num_workers=1, config={"space": "eq", "action": "no_eq"})
    assert "action space different from `NoEqSpace(4)`" in str(caught.value)
    assert "Env 1 has NoEqSpace(4)." in str(caught.value)
    assert NO_EQ.format(what="action") in str(caught.value)


def test_one_env_whose_space_lacks_eq_does_not_equal_its_copy(no_leaks):
    with pytest.raises(RuntimeError) as caught:
        shmenv.make_vec(ENTRY, 1, num_workers=1, config={"space": "no_eq"})
    assert "Env 0 has NoEqSpace(4), which does not equal a copy of itself." in str(caught.value)
    assert "Define __eq__ on NoEqSpace" in str(caught.value)


@pytest.mark.parametrize("num_workers", [1, 3])
def test_spaces_that_really_differ_keep_gymnasiums_message(num_workers, no_leaks):
    fns = [partial(CustomSpaceEnv, space="eq", n=n) for n in (4, 4, 5)]
    with pytest.raises(RuntimeError) as caught:
        shmenv.from_fns(fns, num_workers=num_workers)
    text = str(caught.value)
    assert "Env 2 has EqSpace(5), env 0 has EqSpace(4)." in text
    assert "If this is intentional, use `observation_mode='different'`" in text
    assert "__eq__" not in text
    with shmenv.from_fns(fns[:2], num_workers=2) as envs:  # equal spaces of a class with __eq__ are fine
        envs.reset(seed=0)
