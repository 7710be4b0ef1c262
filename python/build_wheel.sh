#!/usr/bin/env bash
# Builds the binary wheel of the shmenv Python package: the extension and the `shmenv`
# command-line program, for glibc 2.28 and newer (manylinux_2_28: Debian 10+, Ubuntu 20.04+,
# RHEL/Rocky 8+), one abi3 wheel for CPython 3.10 and newer. Installing it needs no Rust.
#
#   bash python/build_wheel.sh           # -> target/wheels/shmenv-VERSION-cp310-abi3-manylinux_2_28_ARCH.whl
#                                        #    and the native plugin packages' wheels, shmenv_ale-*.whl and
#                                        #    shmenv_mujoco-*.whl (python/build_plugin_wheels.sh)
#   bash python/build_wheel.sh --check   # the same, then audit it and try it as a user without Rust would
#
# Needs Rust 1.85+, Python 3.10+ and PyPI. The build tools (maturin, the Zig toolchain from the
# `ziglang` package, which links against an old glibc without a container, cargo-zigbuild,
# auditwheel) go into a virtualenv under target/. About 4-8 minutes on 2 cores, most of it
# compiling the extension and the program in release mode, into target/ARCH-unknown-linux-gnu/.
#
# --check: `auditwheel show` on the wheel (the policy it satisfies), then a fresh virtualenv
# whose PATH has no cargo: `pip install` of the wheel, the README's Python example, a
# Gymnasium env hosted by `from_fns`, `shmenv --help`/`list`/`bench` and `python -m shmenv`,
# and `pip install ./python`, which must stop at once saying that it needs Rust; then the plugin
# wheels installed there (with ale-py and mujoco from PyPI) and an Atari and a MuJoCo env
# stepped through them (a plugin whose build or dependencies cannot be had is skipped, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
check=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build_wheel.sh: unknown argument '$arg' (use --check or --help)" >&2; exit 2 ;;
    esac
done

glibc=2.28
policy="manylinux_${glibc/./_}"
triple="$(uname -m)-unknown-linux-gnu"
out="$root/target/wheels"
work="$root/target/wheel-build"
tools="$work/tools"
start=$SECONDS
step_start=$SECONDS
stage() {
    echo "== wheel: $* ($((SECONDS - start)) s so far)"
    step_start=$SECONDS
}
took() { echo "   took $((SECONDS - step_start)) s"; }

stage "build tools (maturin, ziglang, cargo-zigbuild, auditwheel, wheel) into $tools"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
# The Zig and cargo-zigbuild versions are the ones this script was tested with: a new Zig
# release can change what cargo-zigbuild passes it.
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
    "maturin>=1.9,<2" "ziglang==0.17.1" "cargo-zigbuild==0.24.1" "auditwheel>=6" "wheel>=0.40,<1"
took
export PATH="$tools/bin:$PATH"
# The wheel carries no debug info (half the size); symbol names stay for backtraces and perf.
export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=debuginfo

rm -rf "$work/dist" "$work/unpacked"
stage "the extension: maturin build --release --zig --compatibility $policy"
maturin build --quiet --release --locked --zig --compatibility "$policy" --target "$triple" \
    -m python/Cargo.toml -o "$work/dist"
took

stage "the shmenv program: cargo zigbuild --release -p shmenv-cli --target $triple.$glibc"
cargo zigbuild --quiet --release --locked -p shmenv-cli --target "$triple.$glibc"
took

stage "the program into the wheel (shmenv/_bin/shmenv)"
built=("$work"/dist/shmenv-*.whl)
python -m wheel unpack "${built[0]}" -d "$work/unpacked" >/dev/null
tree=("$work"/unpacked/shmenv-*)
install -D -m 755 "target/$triple/release/shmenv" "${tree[0]}/shmenv/_bin/shmenv"
mkdir -p "$out"
rm -f "$out/$(basename "${built[0]}")"
python -m wheel pack "${tree[0]}" -d "$out" >/dev/null
wheel="$out/$(basename "${built[0]}")"
[ -f "$wheel" ] || { echo "build_wheel.sh: wheel pack did not make $wheel" >&2; exit 1; }
echo "   $wheel: $(du -k "$wheel" | cut -f1) KiB"
echo "== wheel built in $((SECONDS - start)) s: pip install $wheel"

stage "the native plugin packages' wheels: python/build_plugin_wheels.sh"
bash python/build_plugin_wheels.sh
took
[ "$check" = 1 ] || exit 0

stage "auditwheel show (the manylinux policy every ELF file in the wheel satisfies)"
audit="$(auditwheel show "$wheel")"
echo "$audit"
if ! grep -q "\"$policy" <<<"$audit" && ! grep -qE '"manylinux_2_(1[0-9]|2[0-7])_|"manylinux(1|2010|2014)_' <<<"$audit"; then
    echo "build_wheel.sh: auditwheel does not place the wheel in $policy or an older policy" >&2
    exit 1
fi

stage "a fresh virtualenv with no cargo on PATH"
venv="$work/check-venv"
rm -rf "$venv"
python3 -m venv "$venv"
# PATH without any folder that holds cargo, rustc or rustup (~/.cargo/bin, a toolchain's bin).
clean_path="$venv/bin"
IFS=: read -r -a folders <<<"$PATH"
for d in "${folders[@]}"; do
    case "$d" in "$tools"/* | "$venv"/*) continue ;; esac
    [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ] || clean_path="$clean_path:$d"
done
user() { env -u VIRTUAL_ENV -u PYTHONPATH -u CARGO_HOME -u RUSTUP_HOME PATH="$clean_path" "$@"; }
if user bash -c 'command -v cargo'; then
    echo "build_wheel.sh: cargo is still on the check's PATH ($clean_path)" >&2
    exit 1
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
took

stage "pip install the wheel (no cargo on PATH)"
user "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
took

stage "the README's Python example, from the wheel's install"
# The first python block of the README's "Use it from Python" section, run from an empty
# folder so that the checkout's python/shmenv cannot be imported instead.
awk '/^## Use it from Python/{s=1} s&&/^```python/{p=1;next} p&&/^```/{exit} p' README.md >"$scratch/readme.py"
[ -s "$scratch/readme.py" ] || { echo "build_wheel.sh: no python block in the README's Python section" >&2; exit 1; }
(cd "$scratch" && user "$venv/bin/python" - <<'EOF'
import runpy
import shmenv

assert "site-packages" in shmenv.__file__, f"shmenv imported from {shmenv.__file__}, not the wheel's install"
runpy.run_path("readme.py", run_name="__main__")
print("README example ran, shmenv from", shmenv.__file__)
EOF
)
took

stage "a Gymnasium env hosted in shmenv's workers (from_fns), from the wheel's install"
(cd "$scratch" && user "$venv/bin/python" - <<'EOF'
import functools

import gymnasium as gym
import numpy as np
import shmenv

fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=50) for _ in range(4)]
with shmenv.from_fns(fns, num_workers=2, seed=7) as envs:
    reference = gym.vector.SyncVectorEnv(fns)
    obs, _ = envs.reset()
    ref_obs, _ = reference.reset(seed=7)
    assert np.allclose(obs, ref_obs), (obs, ref_obs)
    for t in range(120):
        actions = np.array([(t + i) % 2 for i in range(4)])
        obs, rewards, terms, truncs, infos = envs.step(actions)
        ref_obs, ref_rewards, ref_terms, ref_truncs, _ = reference.step(actions)
        assert np.allclose(obs, ref_obs) and (terms == ref_terms).all() and (truncs == ref_truncs).all(), t
    reference.close()
print("from_fns: 4 hosted CartPole-v1 envs in 2 workers stepped as SyncVectorEnv for 120 steps")
EOF
)
took

stage "the shmenv command from the wheel's install"
(cd "$scratch" && user shmenv --help >/dev/null && user shmenv --version &&
    user shmenv list >list.txt && head -3 list.txt && user "$venv/bin/python" -m shmenv list >/dev/null &&
    user shmenv bench --env CartPole-v1 --num-envs 64 --workers 2 --seconds 1)
echo "   shmenv is $(user bash -c 'command -v shmenv')"
took

stage "pip install ./python without cargo stops at once and says why"
set +e
log="$(user "$venv/bin/python" -m pip install --disable-pip-version-check "$root/python" 2>&1)"
status=$?
set -e
took
if [ "$status" = 0 ] || ! grep -q "needs Rust 1.85+" <<<"$log" || ! grep -q "binary wheel" <<<"$log"; then
    echo "$log" | tail -30
    echo "build_wheel.sh: pip install ./python without cargo should fail at once naming Rust 1.85+ and the wheel (exit $status)" >&2
    exit 1
fi
grep "needs Rust" <<<"$log" | head -1

stage "the plugin wheels, installed with no cargo on PATH: an Atari and a MuJoCo env stepped through them"
user bash python/build_plugin_wheels.sh --check-only "$venv/bin/python"
took
echo "== wheel checked in $((SECONDS - start)) s: $wheel"
