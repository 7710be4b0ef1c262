#!/usr/bin/env bash
# `pip install ./python` as a user with Rust does it: a fresh virtualenv under target/, the
# source build (a release build of the extension and of the `shmenv` program: minutes), then
# the `shmenv` command of that virtualenv (the program the wheel carries, not one on PATH),
# `python -m shmenv`, and no wheel left in the clone's target/wheels by the build.
#   bash tests/source_install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/target/source-install-venv"
start=$SECONDS
rm -rf "$venv"
python3 -m venv "$venv"
mkdir -p target/wheels
marker="$(mktemp)"  # files of target/wheels written after it are the build's
echo "== source install: pip install ./python into $venv (release build: minutes)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check ./python
left="$(find target/wheels -newer "$marker" -type f)"
rm -f "$marker"
if [ -n "$left" ]; then
    echo "tests/source_install.sh: pip install ./python wrote into target/wheels: $left" >&2
    exit 1
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
bundled="$("$venv/bin/python" -c 'import shmenv.__main__ as m; print(m.BUNDLED if m.BUNDLED.is_file() else "")')"
[ -n "$bundled" ] || { echo "tests/source_install.sh: the install carries no shmenv program" >&2; exit 1; }
env PATH="$venv/bin:/usr/bin:/bin" shmenv --version
listed="$(env PATH="$venv/bin:/usr/bin:/bin" shmenv list)"
grep -q '^CartPole-v1 ' <<<"$listed" ||
    { echo "tests/source_install.sh: shmenv list does not list CartPole-v1" >&2; exit 1; }
"$venv/bin/python" -m shmenv --version
echo "== source install checked in $((SECONDS - start)) s: $bundled, target/wheels unchanged"
