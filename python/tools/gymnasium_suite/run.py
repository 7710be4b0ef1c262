"""Runs Gymnasium's own vector and vector-wrapper tests with ``AsyncVectorEnv(env_fns, ...)``
replaced by ``shmenv.from_fns(env_fns, ...)`` (``shmenv_suite_plugin.py``), and prints how many of the
tests that reached shmenv passed, with the failures grouped by cause.

    python python/tools/gymnasium_suite/run.py [--gymnasium-src DIR] [--timeout S] [-k EXPR]

Gymnasium's tests are taken for the installed Gymnasium version: from its source
distribution on PyPI when that ships ``tests/vector``, else from ``--gymnasium-src``, a
Gymnasium source checkout at that version's release (the directory holding ``tests/``).
They are copied into a temporary directory and run there (so the checkout's own
``gymnasium`` package never shadows the installed one), bounded by pytest-timeout. Not
part of the project's pytest run: it takes a few minutes and needs Gymnasium's tests.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUITES = ("tests/vector", "tests/wrappers/vector")


def _from_pypi(version: str, into: str) -> str | None:
    """Gymnasium ``version``'s sdist from PyPI, unpacked into ``into``: the directory
    holding its ``tests/`` when the sdist ships the vector tests, else None."""
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"gymnasium=={version}", "-d", into],
        capture_output=True, text=True,
    )
    archives = [f for f in os.listdir(into) if f.endswith(".tar.gz")]
    if got.returncode != 0 or not archives:
        print(f"pip download gymnasium=={version} failed: {got.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    with tarfile.open(os.path.join(into, archives[0])) as tar:
        names = tar.getnames()
        if not any(f"/{SUITES[0]}/" in n for n in names):
            return None
        tar.extractall(into, filter="data")
    return os.path.join(into, archives[0][: -len(".tar.gz")])


def _copy_tests(src: str, into: str) -> None:
    """Gymnasium's ``tests`` package (every helper module the vector tests import) and a
    pytest configuration of our own (Gymnasium's warning filter)."""
    if not os.path.isdir(os.path.join(src, SUITES[0])):
        raise SystemExit(f"{src} has no {SUITES[0]}: pass the directory of a Gymnasium checkout that holds tests/")
    shutil.copytree(os.path.join(src, "tests"), os.path.join(into, "tests"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(into, "pytest.ini"), "w") as f:
        f.write("[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning:gymnasium.*:\n")


def _group(cause: str) -> str:
    """A failure's cause with the values that differ between parametrizations blurred
    (numbers, reprs of spaces and arrays), so that one cause is one group."""
    text = re.sub(r"0x[0-9a-f]+", "0x..", cause)
    text = re.sub(r"\(.*\)", "(...)", text)
    text = re.sub(r"\[.*\]", "[...]", text)
    text = re.sub(r"\{.*\}", "{...}", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:160]


def _run_to_the_end(cmd: list[str], cwd: str, env: dict, report: str) -> list[dict]:
    """Runs pytest; when a test kills the interpreter (an abort in native code), records
    it as failed ("crashed") and runs again without the tests already done."""
    done: list[dict] = []
    while True:
        code = subprocess.run(cmd + [f"--deselect={r['test']}" for r in done], cwd=cwd, env=env).returncode
        started = None
        with open(report) as f:
            for line in f:
                record = json.loads(line)
                if "started" in record:
                    started = record["started"]
                else:
                    done.append(record)
                    started = None if record["test"] == started else started
        os.remove(report)
        if code in (0, 1, 5) or started is None:
            return done
        print(f"\n{started} killed the test process (exit code {code}): going on without it", flush=True)
        done.append({"test": started, "outcome": "failed", "reached": False, "seconds": 0.0,
                     "cause": f"crashed the interpreter (exit code {code})"})


def summarize(lines: list[dict], verbose: bool) -> None:
    """Prints the counts of the tests that reached shmenv and the failures by cause."""
    reached = [r for r in lines if r["reached"]]
    counts = collections.Counter(r["outcome"] for r in reached)
    others = collections.Counter(r["outcome"] for r in lines if not r["reached"])
    passed = counts["passed"]
    total = sum(counts.values()) - counts["skipped"]
    share = 100.0 * passed / total if total else 0.0
    print(f"\nreached shmenv: {total} tests (+{counts['skipped']} skipped): {passed} passed ({share:.1f}%), "
          f"{counts['failed']} failed, {counts['xfail']} xfail")
    print(f"did not reach shmenv: {sum(others.values())} ({dict(others)})")
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for r in reached:
        if r["outcome"] == "failed":
            groups[_group(r["cause"])].append(r)
    if groups:
        print("\nfailures by cause:")
    for cause, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(rs):4d}  {cause}")
        for r in rs[: None if verbose else 3]:
            print(f"        {r['test']}  [{r['cause'][:200]}]" if verbose else f"        {r['test']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gymnasium-src", help="a Gymnasium checkout at the installed version (holds tests/)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test (pytest-timeout)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run some tests only")
    parser.add_argument("--report", help="also keep the per-test JSON lines in this file")
    parser.add_argument("--verbose", action="store_true", help="list every failing test with its message")
    parser.add_argument("--from-report", help="summarize an earlier --report file instead of running")
    args = parser.parse_args()
    if args.from_report:
        with open(args.from_report) as f:
            summarize([json.loads(line) for line in f], args.verbose)
        return 0
    import gymnasium

    version = gymnasium.__version__
    with tempfile.TemporaryDirectory(prefix="shmenv-gym-suite-") as tmp:
        src = args.gymnasium_src
        if src is None:
            os.makedirs(os.path.join(tmp, "sdist"))
            src = _from_pypi(version, os.path.join(tmp, "sdist"))
        if src is None:
            print(f"gymnasium {version}'s sdist ships no {SUITES[0]}: pass --gymnasium-src, a Gymnasium checkout "
                  f"at the v{version} release", file=sys.stderr)
            return 2
        run_dir = os.path.join(tmp, "run")
        os.makedirs(run_dir)
        _copy_tests(src, run_dir)
        report = os.path.join(tmp, "report.jsonl")
        env = dict(os.environ, SHMENV_SUITE_REPORT=report,
                   PYTHONPATH=os.pathsep.join([HERE, run_dir, os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "shmenv_suite_plugin", "-p", "no:cacheprovider", "--timeout",
               str(args.timeout), "-c", os.path.join(run_dir, "pytest.ini"), "--rootdir", run_dir, *SUITES]
        if args.keyword:
            cmd += ["-k", args.keyword]
        print(f"gymnasium {version} tests from {src}\n$ {' '.join(cmd)}", flush=True)
        lines = _run_to_the_end(cmd, run_dir, env, report)
    if args.report:
        with open(args.report, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in lines)
    summarize(lines, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
