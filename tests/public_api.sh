#!/usr/bin/env bash
# The public API of the library crates, checked against the snapshots in tests/public-api/.
#
#   bash tests/public_api.sh           # check: prints the difference and exits 1 on a change
#   bash tests/public_api.sh --bless   # accept the current API: rewrites the snapshots
#
# `shmenv` is the users' API (a change there is a change for every user: review it as one).
# `shmenv-engine` and `shmenv-worker` are internal to the workspace (no stable API); their
# snapshots list what the CLI, the Python extension and the tests may call, with signatures,
# so that widening them is a visible diff too.
#
# The tool is cargo-public-api (pinned: another version may print the API differently),
# installed into target/tools on first use (about 2.5 minutes). It reads rustdoc's JSON
# output, which stable rustdoc writes under RUSTC_BOOTSTRAP=1: no nightly toolchain needed.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.52.0
crates=(shmenv shmenv-engine shmenv-worker)
snapshots=tests/public-api

bless=false
case "${1:-}" in
    --bless) bless=true ;;
    "") ;;
    *)
        echo "usage: bash tests/public_api.sh [--bless]: unknown argument '$1'" >&2
        exit 2
        ;;
esac

# The pinned version: the one in target/tools, else one of that version on PATH, else
# installed into target/tools.
tools=target/tools
if [ ! -x "$tools/bin/cargo-public-api" ]; then
    if ! cargo-public-api --version 2>/dev/null | grep -qx "cargo-public-api $version"; then
        echo "== installing cargo-public-api $version into $tools (about 2.5 minutes, once)"
        cargo install cargo-public-api --version "$version" --locked --root "$tools"
    fi
fi
if [ -x "$tools/bin/cargo-public-api" ]; then
    export PATH="$PWD/$tools/bin:$PATH"
fi

generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT

changed=()
for crate in "${crates[@]}"; do
    # -sss: leave out blanket, auto-trait and auto-derived impls (they follow from the rest).
    if ! RUSTC_BOOTSTRAP=1 cargo +stable public-api -p "$crate" -sss >"$generated/$crate.txt" \
        2>"$generated/$crate.log"; then
        cat "$generated/$crate.log" >&2
        echo "cargo public-api failed for $crate (its output above)" >&2
        exit 1
    fi
    if $bless; then
        mkdir -p "$snapshots"
        cp "$generated/$crate.txt" "$snapshots/$crate.txt"
        echo "wrote $snapshots/$crate.txt"
        continue
    fi
    committed="$snapshots/$crate.txt"
    [ -f "$committed" ] || committed=/dev/null
    if ! diff -u --label "$snapshots/$crate.txt (committed)" --label "$crate (this tree)" \
        "$committed" "$generated/$crate.txt"; then
        changed+=("$crate")
    fi
done

if [ ${#changed[@]} -gt 0 ]; then
    echo >&2
    echo "the public API of ${changed[*]} differs from tests/public-api/ (the diff above)." >&2
    echo "If the change is intended, accept it with 'bash tests/public_api.sh --bless' and commit" >&2
    echo "the rewritten files with the change; if not, make the new items private or pub(crate)." >&2
    exit 1
fi
$bless || echo "public API unchanged: ${crates[*]}"
