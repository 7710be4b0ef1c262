#!/usr/bin/env bash
# Runs the figures of docs/benchmarks.md with the CLI (pool and serial loop in alternating
# rounds, so machine noise hits both alike), REPEAT times each, and prints the median
# steps/s and ratio of each. Usage: bash benches/figures.sh [REPEAT] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=${1:-3}
seconds=${2:-5}
cargo build --release --quiet
bin=target/release/shmenv
run() {
  local label=$1; shift
  for _ in $(seq "$repeat"); do "$bin" bench "$@" --seconds "$seconds" --baseline --json; done |
    python3 benches/median.py "$label"
}
echo "| case | shmenv steps/s (median) | serial steps/s (median) | ratio (median) | ratios of each run |"
echo "|---|---|---|---|---|"
run "CartPole-v1, 1024 envs, 2 workers" --env CartPole-v1 --num-envs 1024 --workers 2
run "CartPole-v1, 32 envs, 2 workers" --env CartPole-v1 --num-envs 32 --workers 2
run "CartPole-v1, 32 envs, 1 worker" --env CartPole-v1 --num-envs 32 --workers 1
run "Burn-v0 step_us 50, 8 envs, 2 workers" --env Burn-v0 --config '{"step_us":50}' --num-envs 8 --workers 2
run "Burn-v0 trivial, 8 envs, 8 workers" --env Burn-v0 --num-envs 8 --workers 8
run "CartPole-v1, 64 envs, 2 workers, sync" --env CartPole-v1 --num-envs 64 --workers 2
run "CartPole-v1, 64 envs, 2 workers, async batch 32" --env CartPole-v1 --num-envs 64 --workers 2 --batch-size 32
run "Burn-v0 50+-45 us, 16 envs, 2 workers, sync" --env Burn-v0 --config '{"step_us":50,"step_us_jitter":45}' --num-envs 16 --workers 2
run "Burn-v0 50+-45 us, 16 envs, 2 workers, async batch 8" --env Burn-v0 --config '{"step_us":50,"step_us_jitter":45}' --num-envs 16 --workers 2 --batch-size 8
