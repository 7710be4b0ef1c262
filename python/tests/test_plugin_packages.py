"""Native envs installed as Python packages (entry-point group ``shmenv.plugins``,
:mod:`shmenv.plugins`):

- the minimal third-party package of docs/plugins.md (``plugins/example``: C source,
  setup.py, entry point) is built into a wheel with pip, pip-installed into a fresh
  virtualenv, and ``make_vec("WalkC-v0", n)`` there runs its library in the workers with
  no ``plugin=`` (``envs.backend == "plugin"``), as do ``python -m shmenv.plugins`` and
  the errors of a broken package;
- an id of shmenv's own plugin packages asked for without the package says what to
  install, and ``shmenv.envpool.make("Pong-v5")`` without ``shmenv-ale`` warns once that
  it runs through Gymnasium's ALE.

The fresh virtualenv sees this checkout's build of shmenv through a ``.pth`` file naming
the test interpreter's site-packages (the extension is not rebuilt)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import shmenv
from shmenv import plugins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "plugins" / "example"

pytestmark = pytest.mark.timeout(300)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kwargs)


def build_example_wheel(out: Path) -> Path:
    """``pip wheel plugins/example`` (setuptools 70.1+: this interpreter's when it has it,
    else pip's isolated build from PyPI; skipped when neither can be had)."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler to build the example plugin package (set CC)")
    src = out / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(out), str(src)]
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools 70.1+)

        cmd.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    env = {**os.environ, "SHMENV_INCLUDE": str(ROOT / "worker" / "include")}
    done = run(cmd, env=env)
    if done.returncode != 0:
        if "--no-build-isolation" not in cmd and ("setuptools" in done.stderr and "No matching distribution" in
                                                  done.stderr or "Could not fetch" in done.stderr):
            pytest.skip(f"setuptools>=70.1 cannot be had from PyPI to build the example package: {done.stderr[-300:]}")
        pytest.fail(f"pip wheel plugins/example failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (wheel,) = out.glob("shmenv_walk-*.whl")
    assert wheel.name.endswith("linux_x86_64.whl") or "linux" in wheel.name, wheel.name
    assert wheel.name.startswith("shmenv_walk-0.1.0-py3-none-"), f"a py3-none platform wheel: {wheel.name}"
    return wheel


@pytest.fixture(scope="module")
def walk_venv(tmp_path_factory) -> Path:
    """A fresh virtualenv with the example package's wheel pip-installed; shmenv comes from
    this interpreter's site-packages (a .pth file)."""
    base = tmp_path_factory.mktemp("plugin-package")
    wheel = build_example_wheel(base)
    venv = base / "venv"
    done = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    ours = [p for p in site.getsitepackages() if os.path.isdir(p)]
    # addsitedir (not a bare path) so that the .pth files there (shmenv's own) are read too.
    Path(purelib, "shmenv_checkout.pth").write_text(f"import site; list(map(site.addsitedir, {ours!r}))\n")
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                "--disable-pip-version-check", str(wheel)])
    assert done.returncode == 0, f"pip install of the example wheel failed:\n{done.stdout}\n{done.stderr}"
    return python


def in_venv(python: Path, code: str) -> str:
    """Runs `code` with the venv's interpreter from an empty folder; its stdout."""
    done = run([str(python), "-c", textwrap.dedent(code)], cwd=python.parent.parent)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def test_installed_package_runs_natively_without_plugin_argument(walk_venv):
    out = in_venv(walk_venv, """
        import json
        import numpy as np
        import shmenv
        from shmenv import plugins

        envs = shmenv.make_vec("WalkC-v0", 4, num_workers=2, seed=10)
        obs, _ = envs.reset()
        rows = [obs[:, 0].tolist()]
        for t in range(12):
            obs, rew, term, trunc, _ = envs.step(np.ones(4, dtype=np.int64))
            rows.append([obs[:, 0].tolist(), rew.tolist(), term.tolist()])
        found = plugins.find("WalkC-v0")
        print(json.dumps({"backend": envs.backend, "rows": rows, "library": found.library,
                          "distribution": found.distribution, "pids": len(set(envs.worker_pids))}))
        envs.close()
    """)
    got = json.loads(out.splitlines()[-1])
    assert got["backend"] == "plugin"
    assert got["distribution"] == "shmenv-walk"
    assert "site-packages/shmenv_walk/_walk" in got["library"], got["library"]
    assert got["pids"] == 2, "both workers ran"
    # Seeded reset: env i starts at ((10 + i) % 5) - 2; stepping right ends at +5 with reward 1.
    start = [float((10 + i) % 5 - 2) for i in range(4)]
    assert got["rows"][0] == start
    pos, ended = list(start), [False] * 4
    for t, (obs, rew, term) in enumerate(got["rows"][1:]):
        want_obs, want_rew, want_term = [], [], []
        for i in range(4):
            # Next-step autoreset: the step after an end resets the env unseeded (position 0).
            pos[i] = 0.0 if ended[i] else pos[i] + 1
            ended[i] = pos[i] == 5
            want_obs.append(pos[i])
            want_rew.append(1.0 if ended[i] else 0.0)
            want_term.append(ended[i])
        assert (obs, rew, term) == (want_obs, want_rew, want_term), f"step {t}"
    assert sum(r[2].count(True) for r in got["rows"][1:]) >= 4, "every env reached the end"


def test_shmenv_plugins_lists_the_package_and_warns_not(walk_venv):
    out = in_venv(walk_venv, """
        import subprocess, sys
        print(subprocess.run([sys.executable, "-m", "shmenv.plugins", "--json"], capture_output=True,
                             text=True, check=True).stdout)
    """)
    listing = json.loads(out.strip().splitlines()[-1])
    rows = listing["plugins"]
    assert listing["python"] == str(walk_venv) and isinstance(listing["not_installed"], dict), listing
    walk = [r for r in rows if r["env_id"] == "WalkC-v0"]
    assert walk and walk[0]["distribution"] == "shmenv-walk" and walk[0]["library"].endswith(".so"), rows


def test_broken_package_is_named_in_the_error(walk_venv):
    # The package's library is removed: the error names the package and how to repair it.
    out = in_venv(walk_venv, """
        import os
        import shmenv
        from shmenv import plugins

        lib = plugins.find("WalkC-v0").library
        os.rename(lib, lib + ".gone")
        plugins.installed(refresh=True)
        try:
            shmenv.make_vec("WalkC-v0", 2)
        except shmenv.BuildError as e:
            print("refused:", e)
        finally:
            os.rename(lib + ".gone", lib)
    """)
    assert "refused:" in out and "shmenv-walk" in out and "pip install --force-reinstall shmenv-walk" in out, out


def test_own_package_id_without_the_package_says_what_to_install():
    if plugins.find("PongC-v5") is not None:
        pytest.skip("shmenv-ale is installed here")
    with pytest.raises(shmenv.UnknownEnvError, match=r"pip install shmenv-ale"):
        shmenv.make_vec("PongC-v5", 2)


def test_envpool_pong_without_the_ale_package_warns_once():
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py)")
    pytest.importorskip("cv2", reason="OpenCV is not installed (pip install opencv-python-headless)")
    if plugins.find("AtariC-v5") is not None or os.environ.get("SHMENV_ALE_PLUGIN"):
        pytest.skip("a native ALE plugin is installed here")
    import shmenv.envpool as envpool

    plugins._warned.discard("Pong-v5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, num_threads=1)
            envs.close()
    mine = [w for w in caught if issubclass(w.category, plugins.NativePluginMissingWarning)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert str(mine[0].message).startswith(
        "Pong-v5 runs through Gymnasium's ALE in Python workers; pip install shmenv-ale for the native plugin"
    )


def test_docs_show_the_example_package_as_it_is():
    docs = (ROOT / "docs" / "plugins.md").read_text()
    for name in ("pyproject.toml", "setup.py", "shmenv_walk/__init__.py", "src/walk.c"):
        text = (EXAMPLE / name).read_text().rstrip("\n")
        assert f"\n{text}\n```" in docs, f"docs/plugins.md does not show plugins/example/{name} as it is"


def test_shmenv_list_shows_installed_packages_and_their_path(walk_venv):
    from conftest import shmenv_program

    program = shmenv_program()
    if program is None:
        pytest.skip("no shmenv program built in target/ (cargo test or cargo build builds one)")
    # The CLI may be older than this checkout's cli/src (a cargo build refreshes it).
    done = run([str(program), "list", "--python", str(walk_venv)], cwd=walk_venv.parent.parent)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("built-in envs (native, in Rust):\n") and "CartPole-v1" in out, out
    assert f"plugin packages installed for {walk_venv}" in out, out
    lines = out.splitlines()
    (walk,) = [i for i, line in enumerate(lines) if line.startswith("WalkC-v0 ")]
    assert "obs Box(-5, 5, [1], f32), action Discrete(2), limit 100 steps" in lines[walk], lines[walk]
    assert "native plugin from shmenv-walk 0.1.0 (" in lines[walk + 1] and "_walk" in lines[walk + 1], lines[walk + 1]
    # Through the package's launcher, SHMENV_PYTHON names the interpreter: the same listing.
    env = {**os.environ, "SHMENV_PYTHON": str(walk_venv)}
    again = run([str(program), "list"], cwd=walk_venv.parent.parent, env=env)
    assert again.returncode == 0 and "native plugin from shmenv-walk 0.1.0" in again.stdout, again
