#!/usr/bin/env bash
# Builds examples/cpp/ale_atari.cpp (PongC-v5, AtariC-v5: ALE with EnvPool's preprocessing)
# against the C++ Arcade Learning Environment, compiled from the source distribution of the
# `ale-py` PyPI package (the same version as the one installed for the Python given as
# $PYTHON, default python3). The C++ library is built once into a cache folder
# ($ALE_CACHE, default target/ale-VERSION) and linked statically: the plugin is one file,
# rebuilt only when older than its sources.
# Needs pip, cmake (on PATH or beside $PYTHON, e.g. `pip install cmake`), a C++17 compiler
# and zlib's headers (Debian: zlib1g-dev). $CC and $CXX choose the compilers (one program
# each; python/build_plugin_wheels.sh passes Zig's, targeting an old glibc, with its own
# $ALE_CACHE); $ZLIB_DIR, when set, is a folder holding zlib.h, zconf.h and libz.so to use
# instead of the compiler's (a cross compiler does not search the system's folders);
# $LDFLAGS is added to the plugin's link.
# Exits with 75 when the sdist cannot be downloaded or no cmake is found (what cannot be had here), 1 on any other failure.
#   bash examples/cpp/build_ale.sh OUT.so
set -euo pipefail
out="${1:?usage: build_ale.sh OUT.so}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${PYTHON:-python3}"
version="$("$py" -c 'from importlib.metadata import version; print(version("ale-py"))')"
cache="${ALE_CACHE:-$root/target/ale-$version}"
lib="$cache/build/src/ale/libale.a"
zlib_cmake=()
zlib_flags=()
if [ -n "${ZLIB_DIR:-}" ]; then
    zlib_cmake=(-DZLIB_INCLUDE_DIR="$ZLIB_DIR" -DZLIB_LIBRARY="$ZLIB_DIR/libz.so")
    zlib_flags=(-isystem "$ZLIB_DIR" -L "$ZLIB_DIR")
fi

if [ ! -f "$lib" ]; then
    cmake="$(command -v cmake || true)"
    if [ -z "$cmake" ]; then
        cmake="$(dirname "$py")/cmake"
        [ -x "$cmake" ] || { echo "build_ale.sh: no cmake on PATH nor beside $py: pip install cmake" >&2; exit 75; }
    fi
    rm -rf "$cache"
    mkdir -p "$cache/src"
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary ale-py \
        "ale-py==$version" -d "$cache/sdist" ||
        { echo "build_ale.sh: cannot download the source distribution of ale-py $version" >&2; exit 75; }
    tar xzf "$cache/sdist/ale_py-$version.tar.gz" -C "$cache/src" --strip-components=1
    # RelWithDebInfo without -g: the same -O3 as a release build, but without the link-time
    # optimisation that the release build switches on (which would make the archive LTO-only).
    "$cmake" -S "$cache/src" -B "$cache/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O3 -DNDEBUG" -DBUILD_CPP_LIB=ON -DBUILD_PYTHON_LIB=OFF \
        -DSDL_SUPPORT=OFF -DBUILD_VECTOR_LIB=OFF "${zlib_cmake[@]}" >"$cache/cmake.log"
    "$cmake" --build "$cache/build" --target ale-lib -j "${JOBS:-2}" >>"$cache/cmake.log"
fi

# The plugin itself: skipped when OUT is newer than everything it is made of.
sources=("$root/examples/cpp/ale_atari.cpp" "$root/worker/include/shmenv_env.h"
    "$root/worker/include/shmenv_env.hpp" "$lib" "$0")
fresh=1
for f in "${sources[@]}"; do [ "$out" -nt "$f" ] || fresh=0; done
[ "$fresh" = 1 ] && exit 0
mkdir -p "$(dirname "$out")"
"${CXX:-c++}" -std=c++17 -O3 -ffp-contract=off -fno-math-errno -Wall -Wextra -Werror -shared -fPIC \
    -I "$root/worker/include" -isystem "$cache/src/src" -isystem "$cache/build/src/ale" "${zlib_flags[@]}" \
    -o "$out.tmp" "$root/examples/cpp/ale_atari.cpp" "$lib" -lz -lpthread ${LDFLAGS:-}
mv "$out.tmp" "$out"
