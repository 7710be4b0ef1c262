"""The pool's defaults have one home, the engine's builder (``PoolBuilder::DEFAULT_*``):
the extension exports them (``_shmenv.pool_defaults()``), ``PoolOptions`` reads the ones
the engine decides, and the one rule where Python chooses otherwise (zero-copy async
retains a batch and gets one more ring block) is :func:`shmenv.options.ring_settings`
(what the retained batch is for: ``test_vector``'s zero-copy async test)."""

from __future__ import annotations

import dataclasses

import pytest
from gymnasium.vector import AutoresetMode

from shmenv import _shmenv
from shmenv.options import ENGINE_DEFAULTS, PoolOptions, ring_settings


def test_the_engine_exports_its_builder_defaults():
    # The values the builder's setters document.
    assert _shmenv.pool_defaults() == {
        "ring_depth": 2, "retain_batches": 0, "fair_scheduling": True, "wait": "auto", "pin_workers": True,
        "autoreset_mode": "NextStep", "startup_timeout": 60.0, "stats": True, "trace": False,
    }
    assert ENGINE_DEFAULTS == _shmenv.pool_defaults()


def test_pool_options_take_the_engines_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(PoolOptions)}
    assert fields["autoreset_mode"] is AutoresetMode(ENGINE_DEFAULTS["autoreset_mode"]) is AutoresetMode.NEXT_STEP
    for name in ("wait", "pin_workers", "fair_scheduling"):
        assert fields[name] == ENGINE_DEFAULTS[name], name
    # Left to the engine (or to ring_settings): None.
    assert fields["ring_depth"] is None and fields["num_workers"] is None and fields["step_timeout"] is None


@pytest.mark.parametrize("given,zero_copy_async,want", [
    (None, False, (2, 0)),  # the engine's defaults
    (None, True, (3, 1)),  # zero-copy async: one batch retained, one block more
    (5, False, (5, 0)),
    (2, True, (2, 1)),  # a given depth is passed as it is (the engine checks depth >= retain + 1)
])
def test_ring_settings_are_the_engines_but_for_zero_copy_async(given, zero_copy_async, want):
    assert ring_settings(given, zero_copy_async) == want
