#!/usr/bin/env bash
# The plugin figures of docs/benchmarks.md: the C CartPole plugin (examples/c/cartpole.c,
# which has the batched call, and the same source without it: a step and an observe call
# per env) against the built-in CartPole-v1, each with its in-process serial loop (the
# plugin's loads the same library into the CLI's process), runs interleaved (built-in,
# plugin, per-env plugin, built-in, ...) so machine noise hits all alike; medians. Usage: bash benches/plugins.sh [REPEAT] [SECONDS] [NUM_ENVS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=${1:-5}
seconds=${2:-3}
n=${3:-1024}
cargo build --release --quiet -p shmenv-cli
bin=target/release/shmenv
lib=target/release/libcartpole.so
${CC:-cc} -std=c99 -O2 -shared -fPIC -I worker/include -o "$lib" examples/c/cartpole.c -lm
out=$(mktemp -d)
per_env=target/release/libcartpole_per_env.so
sed 's/destroy, step_batch,/destroy, NULL,/' examples/c/cartpole.c > "$out/cartpole_per_env.c"
grep -q 'destroy, NULL,' "$out/cartpole_per_env.c"
${CC:-cc} -std=c99 -O2 -shared -fPIC -I worker/include -o "$per_env" "$out/cartpole_per_env.c" -lm
for _ in $(seq "$repeat"); do
  "$bin" bench --env CartPole-v1 --num-envs "$n" --workers 2 --seconds "$seconds" --baseline --json >> "$out/builtin"
  "$bin" bench --plugin "$lib" --env CartPoleC-v1 --num-envs "$n" --workers 2 --seconds "$seconds" --baseline --json >> "$out/plugin"
  "$bin" bench --plugin "$per_env" --env CartPoleC-v1 --num-envs "$n" --workers 2 --seconds "$seconds" --baseline --json >> "$out/per_env"
done
echo "| case | shmenv steps/s (median) | serial steps/s (median) | ratio (median) | ratios of each run |"
echo "|---|---|---|---|---|"
python3 benches/median.py "CartPole-v1 (built-in), $n envs, 2 workers" < "$out/builtin"
python3 benches/median.py "CartPoleC-v1 (C plugin, batched call), $n envs, 2 workers" < "$out/plugin"
python3 benches/median.py "CartPoleC-v1 (C plugin, a call per env), $n envs, 2 workers" < "$out/per_env"
python3 - "$out" <<'PY'
import json, statistics, sys
load = lambda name: [json.loads(l)["steps_per_sec"] for l in open(f"{sys.argv[1]}/{name}") if l.strip()]
b = load("builtin")
for name, label in (("plugin", "plugin (batched)"), ("per_env", "plugin (a call per env)")):
    p = load(name)
    each = ", ".join(f"{y / x:.2f}" for x, y in zip(b, p))
    print(f"\n{label} / built-in pool steps/s: median {statistics.median(y / x for x, y in zip(b, p)):.2f} (each run: {each})")
PY
rm -r "$out"
