#!/usr/bin/env bash
# Builds examples/c/mujoco_locomotion.c (HalfCheetahC-v5, HopperC-v5) against the MuJoCo C
# API shipped in the `mujoco` PyPI wheel (headers and libmujoco.so), found through the
# Python given as $PYTHON (default python3). The library finds libmujoco.so at run time
# through its RPATH: by default the folder it was built against; python/build_wheel.sh sets
# RPATH='$ORIGIN/../mujoco' (the mujoco package beside the plugin package's folder).
#   bash examples/c/build_mujoco.sh OUT.so
set -euo pipefail
out="${1:?usage: build_mujoco.sh OUT.so}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mj="$("${PYTHON:-python3}" -c 'import mujoco, os; print(os.path.dirname(mujoco.__file__))')"
lib="$(ls "$mj"/libmujoco.so* | head -n 1)"
mkdir -p "$(dirname "$out")"
"${CC:-cc}" -std=c99 -O2 -Wall -Wextra -Werror -shared -fPIC \
    -I "$root/worker/include" -I "$mj/include" \
    -o "$out.tmp" "$root/examples/c/mujoco_locomotion.c" "$lib" -Wl,-rpath,"${RPATH:-$mj}" -lm
mv "$out.tmp" "$out"
