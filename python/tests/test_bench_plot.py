"""``python -m shmenv.bench --plot FILE``: the real benchmark in a subprocess, short, drawing
its comparison as SVG and as PNG (chosen by the suffix); every contestant that ran is in the
table and in the plot, and a file that cannot be written is refused before any run."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--passes", "1", "--rounds", "1", "--round-seconds", "0.05", "--overhead-rounds", "0"]
# shmenv sync and async, Gymnasium's SyncVectorEnv, and EnvPool when installed (skipped with
# a message when not): every kind of contestant the comparison runs, except AsyncVectorEnv's
# process per env, which adds nothing to what the plot is tested for.
ONLY = "shmenv,shmenv-async,sync,envpool"
# A run that got past the checks would take 8 x 1000 s: a refusal must come before it.
NEVER_ENDS = ["--passes", "1", "--rounds", "1", "--round-seconds", "1000", "--overhead-rounds", "0"]


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m shmenv.bench`` with `args` in a subprocess (the way users run it)."""
    cmd = [sys.executable, "-m", "shmenv.bench", "--env", "CartPole-v1", "--num-envs", "4", "--workers", "1", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def table_rows(stdout: str) -> list[str]:
    """The contestants' names in the printed table (the lines between the header and the
    first line that is not a contestant's)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("engine "))
    names = []
    for line in lines[start + 1 :]:
        if "steps/s" in line or not any(ch.isdigit() for ch in line) or line.startswith(("n/a ", "skipped ", "saved ")):
            break
        names.append(line.split("  ")[0].strip())
    return names


def svg_texts(path: Path) -> list[str]:
    """Every text of an SVG file, parsed as XML (matplotlib writes text as <text> elements
    with the bench's svg.fonttype)."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), root.tag
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text") or el.tag == "text"]


def test_svg_plot_holds_every_contestant_of_the_table(tmp_path):
    out = tmp_path / "compare.svg"
    r = bench(*SHORT, "--only", ONLY, "--plot", str(out))
    assert r.returncode == 0, r.stderr
    assert f"saved {out}" in r.stdout
    names = table_rows(r.stdout)
    assert names[:2] == ["shmenv sync (1 workers, native)", "shmenv async (batch 2, 1 workers, native)"], r.stdout
    assert "gymnasium SyncVectorEnv" in names, r.stdout
    # EnvPool: in the table when installed, else reported as skipped (never silently gone).
    assert any(n.startswith("EnvPool") for n in names) or "skipped envpool: envpool not installed" in r.stdout
    texts = svg_texts(out)
    for name in names:
        assert name in texts, (name, texts)
    labels = [t for t in texts if "x SyncVectorEnv" in t]
    assert len(labels) == len(names), texts  # one steps/s label per bar
    assert any(t.startswith("CartPole-v1: 4 envs, 1 workers/threads, async batches of 2") for t in texts), texts


def test_png_plot_is_an_image_and_png_is_the_old_name_of_plot(tmp_path):
    import matplotlib.image

    out = tmp_path / "compare.png"
    r = bench(*SHORT, "--only", "shmenv,sync", "--png", str(out))
    assert r.returncode == 0, r.stderr
    assert "--png is deprecated; use --plot FILE" in r.stderr
    assert table_rows(r.stdout) == ["shmenv sync (1 workers, native)", "gymnasium SyncVectorEnv"], r.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100, image.shape


@pytest.mark.parametrize(
    "name, expected",
    [
        ("compare.pdf", "the suffix '.pdf' names no format this bench writes; end the file name with .svg or .png"),
        ("compare", "the suffix '(none)' names no format"),
        ("no-such-dir/compare.svg", "cannot be written (No such file or directory)"),
        ("a-directory.svg", "cannot be written (Is a directory)"),
    ],
)
def test_a_plot_that_cannot_be_written_is_refused_before_any_run(tmp_path, name, expected):
    (tmp_path / "a-directory.svg").mkdir()
    target = tmp_path / name
    r = bench(*NEVER_ENDS, "--plot", str(target), timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expected in r.stderr, r.stderr
    assert "steps/s" not in r.stdout and r.stdout == "", r.stdout  # no table: nothing ran
    assert sorted(os.listdir(tmp_path)) == ["a-directory.svg"]  # nothing left behind


def test_plot_is_refused_with_contend_and_with_its_old_name(tmp_path):
    r = bench("--contend", "0", "--plot", str(tmp_path / "x.svg"), *NEVER_ENDS[:-2], timeout=120)
    assert r.returncode == 2 and "--plot does not apply to --contend" in r.stderr, r.stderr
    r = bench("--plot", str(tmp_path / "x.svg"), "--png", str(tmp_path / "y.png"), *NEVER_ENDS, timeout=120)
    assert r.returncode == 2 and "give only --plot FILE" in r.stderr, r.stderr
    r = bench("--workload", "classic", "--plot", str(tmp_path / "x.svg"), timeout=120)
    assert r.returncode == 2 and "--plot does not apply to --workload" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


def test_the_bench_without_plot_never_imports_matplotlib():
    code = (
        "import sys, shmenv\n"
        "from shmenv.bench.__main__ import main\n"
        "assert main(['--env', 'CartPole-v1', '--num-envs', '4', '--workers', '1', '--only', 'shmenv', "
        + ", ".join(repr(a) for a in SHORT)
        + "]) == 0\n"
        "print('matplotlib' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "False", r.stdout
