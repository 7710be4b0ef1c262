#!/usr/bin/env bash
# The workers sweep for a many-core machine (docs/scaling.md, "Measured on 16 cores"):
# CartPole-v1 and Burn-v0 (50 us of CPU a step), sync and async (batches of half the
# envs), 1 to 16 workers, each value once per round in interleaved rounds with the
# in-process serial loop, writing for each of the four sweeps a table (.txt), every run's
# figures (.json) and a plot (.svg) into OUT_DIR. No GPU and no build: it runs a prebuilt
# binary (cargo build --release -p shmenv-cli makes target/release/shmenv).
#
# Usage: bash benches/scaling_sweep.sh OUT_DIR
# Environment (defaults in brackets):
#   SHMENV         the shmenv binary [target/release/shmenv]
#   SWEEP_WORKERS  the worker counts [1,2,4,8,12,16]
#   SWEEP_ROUNDS   rounds [2];  SWEEP_SECONDS  seconds per run [1.5]
#   CARTPOLE_ENVS  CartPole-v1 envs in all [6144: 384 a worker at 16 workers, 512 at 12]
#   BURN_ENVS      Burn-v0 envs in all [96: 6 a worker at 16 workers, 8 at 12]
# Every worker count must divide both env counts, and so must half of each (the async
# batch). A quick try: SWEEP_WORKERS=1,2 SWEEP_ROUNDS=1 SWEEP_SECONDS=0.2 bash benches/scaling_sweep.sh /tmp/s
set -euo pipefail
out=${1:?usage: bash benches/scaling_sweep.sh OUT_DIR}
shmenv=${SHMENV:-target/release/shmenv}
workers=${SWEEP_WORKERS:-1,2,4,8,12,16}
rounds=${SWEEP_ROUNDS:-2}
seconds=${SWEEP_SECONDS:-1.5}
cartpole_envs=${CARTPOLE_ENVS:-6144}
burn_envs=${BURN_ENVS:-96}

if [[ ! -x $shmenv ]]; then
  echo "error: no shmenv binary at $shmenv: build one (cargo build --release -p shmenv-cli) or set SHMENV" >&2
  exit 1
fi
IFS=, read -ra counts <<< "$workers"
for n in "$cartpole_envs" "$burn_envs"; do
  for w in "${counts[@]}"; do
    if (( n % w != 0 || (n / 2) % w != 0 )); then
      echo "error: $w workers do not divide $n envs (or their half, the async batch): set SWEEP_WORKERS, CARTPOLE_ENVS or BURN_ENVS" >&2
      exit 1
    fi
  done
done

# 4 sweeps x rounds x (each worker count + the serial loop) runs of SECONDS each.
runs=$(( 4 * rounds * (${#counts[@]} + 1) ))
stepping=$(awk -v r="$runs" -v s="$seconds" 'BEGIN { printf "%.0f", r * s }')
echo "scaling sweep: 4 sweeps x $rounds rounds x (${#counts[@]} worker counts + the serial loop) = $runs runs" \
  "x $seconds s = $stepping s of stepping, plus a pool start-up per run; $(nproc) cores here"

mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cores: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  echo "uptime before: $(uptime)"
  echo "binary: $shmenv ($("$shmenv" --version))"
} > "$out/machine.txt"

sweep() {
  local name=$1; shift
  echo "== $name"
  "$shmenv" bench --sweep workers --values "$workers" --rounds "$rounds" --seconds "$seconds" --baseline \
    --plot "$out/$name.svg" --json-file "$out/$name.json" "$@" | tee "$out/$name.txt"
}

start=$SECONDS
sweep cartpole-sync --env CartPole-v1 --num-envs "$cartpole_envs"
sweep cartpole-async --env CartPole-v1 --num-envs "$cartpole_envs" --batch-size $(( cartpole_envs / 2 ))
sweep burn-sync --env Burn-v0 --config '{"step_us": 50}' --num-envs "$burn_envs"
sweep burn-async --env Burn-v0 --config '{"step_us": 50}' --num-envs "$burn_envs" --batch-size $(( burn_envs / 2 ))
echo "uptime after: $(uptime)" >> "$out/machine.txt"
echo "done in $(( SECONDS - start )) s: $out/{cartpole,burn}-{sync,async}.{txt,json,svg} and $out/machine.txt"
