"""Native env plugins installed as Python packages, found by entry point.

A package that ships a plugin library (a shared object implementing
``worker/include/shmenv_env.h``) declares one entry point per env id in the group
``shmenv.plugins``, its name the env id and its object a function that takes the id and
returns a mapping::

    [project.entry-points."shmenv.plugins"]
    "MyEnv-v0" = "my_env_package:plugin"

    def plugin(env_id: str) -> dict:
        return {"library": "/abs/path/of/libmyenv.so", "config": {...}}  # config: optional defaults

``shmenv.make_vec("MyEnv-v0", n)`` (and everything built on it: ``shmenv.envpool``,
``shmenv.torchrl.ShmEnv``, ``shmenv.sb3``, ``python -m shmenv.bench``) then loads that
library in its workers without ``plugin=``; the ``config`` given is laid over the
package's defaults. Nothing is scanned at ``import shmenv``: the entry points are read on
the first id that is not a built-in one, once per process (:func:`installed`), and a
package's function is called only when one of its ids is asked for (:func:`find`).

``python -m shmenv.plugins`` prints what is installed (``--json``: one object per id), which
the ``shmenv list`` command asks of the Python that runs it.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from shmenv.errors import BuildError, UnknownEnvError

#: The entry-point group plugin packages register under.
GROUP = "shmenv.plugins"

#: Ids that shmenv's own plugin packages provide, and the package that does (for the message
#: when one is asked for and the package is not installed).
KNOWN: dict[str, str] = {
    "PongC-v5": "shmenv-ale",
    "AtariC-v5": "shmenv-ale",
    "HalfCheetahC-v5": "shmenv-mujoco",
    "HopperC-v5": "shmenv-mujoco",
    "AntC-v5": "shmenv-mujoco",
}

#: What each of those packages makes faster than the Python path, as measured
#: (docs/benchmarks.md), for the fallback warning.
SPEEDUP: dict[str, str] = {"shmenv-ale": "about 1.5x faster here"}


class NativePluginMissingWarning(UserWarning):
    """An id that a native plugin package runs natively is running in Python workers,
    because that package is not installed (issued once per id and process)."""


@dataclass(frozen=True)
class Registration:
    """One installed entry point: an env id, the distribution that declares it and the
    ``module:function`` that gives its library (not called yet)."""

    env_id: str
    distribution: str
    version: str
    value: str


@dataclass(frozen=True)
class Plugin:
    """An installed plugin for one env id: its library and default config."""

    env_id: str
    library: str
    distribution: str
    version: str
    config: dict[str, Any] = field(default_factory=dict)


_installed: dict[str, list[Registration]] | None = None
_found: dict[str, Plugin] = {}
_warned: set[str] = set()


def installed(refresh: bool = False) -> dict[str, list[Registration]]:
    """Every id of the group, with the distributions that declare it (usually one), read
    from the installed packages' metadata once per process (``refresh=True`` reads again,
    e.g. after a ``pip install`` in this process)."""
    global _installed
    if _installed is not None and not refresh:
        return _installed
    from importlib.metadata import distributions

    out: dict[str, list[Registration]] = {}
    seen: set[str] = set()
    for dist in distributions():
        name = dist.metadata["Name"] or "?"
        key = name.lower().replace("_", "-")
        if key in seen:
            # The same distribution again, further along sys.path: the first one is imported.
            continue
        seen.add(key)
        for ep in dist.entry_points:
            if ep.group == GROUP:
                out.setdefault(ep.name, []).append(Registration(ep.name, name, dist.version, ep.value))
    _installed = out
    if refresh:
        _found.clear()
    return out


def _load(reg: Registration) -> Plugin:
    """Calls the registration's function and checks what it returns."""
    from importlib.metadata import EntryPoint

    where = f"the {reg.distribution} {reg.version} package's plugin entry point {reg.env_id!r} = {reg.value!r}"
    try:
        info = EntryPoint(reg.env_id, reg.value, GROUP).load()(reg.env_id)
    except Exception as e:  # noqa: BLE001 - whatever the package raises is reported with its name
        raise BuildError(
            f"{where} failed: {type(e).__name__}: {e}. Reinstall the package (pip install --force-reinstall "
            f"{reg.distribution}), or pass plugin=PATH to make_vec to use a library of your own"
        ) from e
    if not isinstance(info, dict) or not isinstance(info.get("library"), (str, os.PathLike)):
        raise BuildError(
            f"{where} returned {info!r}; it must return a dict with 'library' (the path of the shared library) "
            "and optionally 'config' (a dict of default config): the package is broken, tell its authors"
        )
    library = os.path.abspath(os.fspath(info["library"]))
    if not os.path.isfile(library):
        raise BuildError(
            f"{where} names the library {library}, which does not exist: reinstall the package "
            f"(pip install --force-reinstall {reg.distribution})"
        )
    config = info.get("config") or {}
    if not isinstance(config, dict):
        raise BuildError(f"{where} returned config {config!r}, which is not a dict: the package is broken")
    return Plugin(reg.env_id, library, reg.distribution, reg.version, dict(config))


def find(env_id: str) -> Plugin | None:
    """The installed plugin for ``env_id``, or None when no installed package declares it.
    Raises :class:`shmenv.errors.BuildError` when two packages declare it or the package's
    function fails."""
    if env_id in _found:
        return _found[env_id]
    regs = installed().get(env_id)
    if not regs:
        return None
    if len(regs) > 1:
        names = ", ".join(f"{r.distribution} {r.version}" for r in regs)
        raise BuildError(
            f"{len(regs)} installed packages provide the native env {env_id!r} ({names}): uninstall all but one "
            "(pip uninstall NAME), or pass plugin=PATH to make_vec to choose a library"
        )
    plugin = _load(regs[0])
    _found[env_id] = plugin
    return plugin


def missing(env_id: str) -> UnknownEnvError | None:
    """The error for an id of shmenv's own plugin packages when that package is not
    installed (None for any other id)."""
    package = KNOWN.get(env_id)
    if package is None:
        return None
    err = UnknownEnvError(
        f"{env_id!r} is the native env of the {package} package, which is not installed: pip install {package} "
        f"(or build its library in a clone and pass plugin=PATH; docs/plugins.md)"
    )
    err.env_id, err.registered, err.closest = env_id, sorted(installed()), None
    return err


def warn_fallback(env_id: str, native_id: str, python_path: str) -> None:
    """Warns, once per ``env_id`` and process, that ``env_id`` runs through
    ``python_path`` because the package providing ``native_id`` is not installed."""
    if env_id in _warned:
        return
    _warned.add(env_id)
    package = KNOWN.get(native_id, "a native plugin package")
    speed = SPEEDUP.get(package)
    warnings.warn(
        f"{env_id} runs through {python_path} in Python workers; pip install {package} for the native plugin"
        + (f" ({speed})" if speed else ""),
        NativePluginMissingWarning,
        stacklevel=3,
    )


def describe() -> list[dict[str, Any]]:
    """One row per installed id: ``env_id``, ``distribution``, ``version``, and ``library``
    with ``config`` (its defaults) or ``error``, for ``shmenv list``."""
    rows: list[dict[str, Any]] = []
    for env_id, regs in sorted(installed().items()):
        for reg in regs:
            row: dict[str, Any] = {"env_id": env_id, "distribution": reg.distribution, "version": reg.version}
            try:
                found = _load(reg)
                row.update(library=found.library, config=found.config)
            except BuildError as e:
                row["error"] = str(e)
            rows.append(row)
    return rows


def not_installed() -> dict[str, list[str]]:
    """shmenv's own plugin packages that are not installed, with their ids."""
    have = installed()
    out: dict[str, list[str]] = {}
    for env_id, package in KNOWN.items():
        if env_id not in have:
            out.setdefault(package, []).append(env_id)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m shmenv.plugins [--json]``: the installed plugin packages and their ids
    (``--json``: ``{"python", "plugins": [describe()'s rows], "not_installed": {package: ids}}``,
    which ``shmenv list`` reads)."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--json"]):
        print("usage: python -m shmenv.plugins [--json]", file=sys.stderr)
        return 2
    rows = describe()
    if args == ["--json"]:
        print(json.dumps({"python": sys.executable, "plugins": rows, "not_installed": not_installed()}))
        return 0
    if not rows:
        print(f"no plugin packages installed (entry-point group {GROUP!r})")
    for row in rows:
        where = row.get("library") or f"error: {row['error']}"
        print(f"{row['env_id']}  from {row['distribution']} {row['version']}: {where}")
    for package, ids in not_installed().items():
        print(f"{', '.join(ids)}: not installed (pip install {package})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
