"""``python -m shmenv.bench`` in miniature: contestant selection, copy / no-copy pairs, the
image workload's baselines reported as not applicable, and the 1-env call cost."""

from __future__ import annotations

import json

import pytest

from shmenv.bench.__main__ import main as bench_main
from shmenv.bench.call import call_overhead

TINY = ["--passes", "1", "--rounds", "1", "--round-seconds", "0.02", "--overhead-rounds", "1", "--json"]


def run_json(capsys, *args: str) -> dict:
    assert bench_main([*args, *TINY]) == 0
    return json.loads(capsys.readouterr().out)


def test_unknown_contestant_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bench_main(["--only", "shmenv,bogus"])
    assert e.value.code == 2
    assert "bogus" in capsys.readouterr().err


def test_image_workload_copy_pairs_and_baselines(capsys):
    only = "shmenv,shmenv-nocopy,shmenv-async,shmenv-async-nocopy,sync,envpool"
    config = json.dumps({"obs_shape": [4, 84, 84], "obs_dtype": "u8"})
    r = run_json(capsys, "--env", "Burn-v0", "--config", config, "--num-envs", "4", "--workers", "1", "--only", only)
    keys = [row["key"] for row in r["rows"]]
    assert keys == ["shmenv", "shmenv-nocopy", "shmenv-async", "shmenv-async-nocopy"]
    by_key = {row["key"]: row for row in r["rows"]}
    assert "copy=False" in by_key["shmenv-nocopy"]["name"] and "copy" not in by_key["shmenv"]["name"]
    assert by_key["shmenv"]["obs_bytes_per_batch"] == 4 * 4 * 84 * 84
    assert by_key["shmenv-async"]["obs_bytes_per_batch"] == 2 * 4 * 84 * 84
    assert by_key["shmenv"]["vs_nocopy"] > 0 and by_key["shmenv-nocopy"]["vs_nocopy"] is None
    for mode, rows in (("sync", 4), ("async", 2)):
        cost = r["copy_cost"][mode]
        assert cost["batch_envs"] == rows and cost["ratio"] > 0 and len(cost["pass_ratios"]) == 1
    # No Gymnasium or EnvPool Burn-v0: reported, not failed (EnvPool may not be installed).
    assert "Gymnasium has no Burn-v0" in r["not_applicable"]["sync"]
    assert "envpool" in r["not_applicable"] or "not installed" in r["skipped"]["envpool"]
    o = r["call_overhead"]
    assert o["config"] == {"obs_shape": [4, 84, 84], "obs_dtype": "u8"}
    assert o["copy"]["median_us"] > 0 and o["nocopy"]["median_us"] > 0
    assert r["shmenv_step_call_us_1_env"] == o["copy"]["median_us"]


def test_call_overhead_leaves_out_the_env_work():
    o = call_overhead("Burn-v0", {"step_us": 2000, "step_us_jitter": 10, "episode_len": 50}, rounds=1)
    # What the bench decides: the env's work (the 2 ms step) is dropped from the config it
    # times, whatever a busy machine makes of the median.
    assert o["config"] == {"episode_len": 50}
    assert o["nocopy"]["median_us"] > 0


def test_infos_bench_compares_both_pools_and_times_the_merges(capsys, no_leaks):
    from shmenv.bench.infos import main as infos_main

    infos_main(["--envs", "4", "--rounds", "1", "--seconds", "0.1", "--pairs", "40"])
    out = capsys.readouterr().out
    for line in ("no info:", "infos every step:", "ratio:", "infos cost:", "merging infos:", "timer itself:"):
        assert line in out, out
    gross, timer, net = (float(out.split(f"{k}:")[1].split()[0]) for k in ("merging infos", "timer itself", "net"))
    assert timer > 0 and abs(gross - timer - net) < 0.11, out
    merging = out.split("merging infos:")[1]
    batches = int(merging.split("median of ")[1].split()[0])
    assert batches > 10, out  # every batch of the pool with infos merged some
    assert "medians of 40 paired batches" in out, out
    assert float(merging.split()[0]) > 0, out
