#!/usr/bin/env bash
# noise-check: how often the nightly's compare flags a regression that is
# not there (false alarms) and how often it flags one that is (power),
# from one pool of runs of the latency feature on the local testbed.
#
# The pool: NOISE_RUNS runs of the unchanged commit and NOISE_PLANTED_RUNS
# runs with a planted slowdown (the operator built with -tags
# gpulab_faults, GPULAB_PLANTED_FAULT=slow-pod-create, waiting
# NOISE_PLANTED_DELAY before each pod create), interleaved so that drift of
# the machine hits both alike. Both use the same operator binary.
#
# The draw, fixed so that a rerun over the same pool gives the same table:
# comparison k (k = 0..NOISE_COMPARISONS-1) shuffles each pool with awk's
# generator seeded by 1+k (unchanged) and 1001+k (planted; the same awk
# gives the same order; mawk gives seeds 0 and 1 the same sequence, so no
# seed is 0), then
#   false alarm k: baseline = the first three unchanged runs, current = the
#     next three (six distinct runs);
#   power k: baseline = the first three unchanged runs, current = the first
#     three planted runs.
# Comparisons overlap in runs (a pool of 20 holds 3 disjoint 3-vs-3
# pairs), so their verdicts are not independent; a small pool still gives
# distinct comparisons instead of repeating the same few.
# Two comparisons that drew the same runs stop the check: they would count
# one draw twice. A comparison "flags" when compare exits 1 (a regression).
# Only runs that passed enter the pool; the others are listed.
#
# Usage: conformance/hack/noise-check.sh [compare flags...]
#   NOISE_RUNS=20 NOISE_PLANTED_RUNS=10 NOISE_COMPARISONS=10
#   NOISE_PLANTED_DELAY=1500ms CONFORMANCE_SCALE=100 NOISE_OUT=_artifacts/noise-check
#   NOISE_REUSE=1 reuses the runs already in NOISE_OUT and only redraws.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=${NOISE_RUNS:-20}
planted=${NOISE_PLANTED_RUNS:-10}
comparisons=${NOISE_COMPARISONS:-10}
delay=${NOISE_PLANTED_DELAY:-1500ms}
scale=${CONFORMANCE_SCALE:-100}
out=${NOISE_OUT:-_artifacts/noise-check}
bin=${BIN:-bin}
compare_flags=("$@")

if ((runs < 6 || planted < 3)); then
  echo "noise-check: needs NOISE_RUNS >= 6 and NOISE_PLANTED_RUNS >= 3" >&2
  exit 2
fi

# LDFLAGS (the Makefile's) stamps the version, so each run records its commit.
go build -tags gpulab_faults -ldflags "${LDFLAGS:-}" -o "$bin/gpulab-operator-faulty" ./operator/cmd/gpulab-operator
go test -c -ldflags "${LDFLAGS:-}" -o "$bin/gpulab-conformance" ./conformance

one() { # one KIND INDEX [ENV...]
  local dir="$out/$1/run-$2"
  shift 2
  if [[ "${NOISE_REUSE:-0}" == 1 && -f "$dir/results.json" ]]; then return; fi
  rm -rf "$dir"
  local rc=0
  env "$@" "$bin/gpulab-conformance" run --profile=local --feature='^latency$' --scale="$scale" \
    --operator-binary="$bin/gpulab-operator-faulty" --out="$dir" >"$dir.log" 2>&1 || rc=$?
  echo "$dir: exit $rc"
  echo "$rc" >"$dir.rc"
}

mkdir -p "$out/unchanged" "$out/planted"
for ((i = 0; i < (runs > planted ? runs : planted); i++)); do
  ((i < runs)) && one unchanged "$i" GPULAB_PLANTED_FAULT=
  ((i < planted)) && one planted "$i" GPULAB_PLANTED_FAULT=slow-pod-create GPULAB_PLANTED_DELAY="$delay"
done

pool() { # the passed runs' results, in index order
  local kind=$1 n=$2
  for ((i = 0; i < n; i++)); do
    local dir="$out/$kind/run-$i"
    if [[ -f "$dir/results.json" && "$(cat "$dir.rc" 2>/dev/null || echo 0)" == 0 ]]; then
      echo "$dir/results.json"
    else
      echo "noise-check: $dir did not pass; left out of the pool" >&2
    fi
  done
}
mapfile -t U < <(pool unchanged "$runs")
mapfile -t P < <(pool planted "$planted")
if ((${#U[@]} < 6 || ${#P[@]} < 3)); then
  echo "noise-check: too few passed runs (${#U[@]} unchanged, ${#P[@]} planted)" >&2
  exit 1
fi

draw() { # draw NAME BASE... -- CURRENT...
  local name=$1 rc=0
  shift
  local base=() cur=()
  while [[ $1 != -- ]]; do base+=(--baseline "$1"); shift; done
  shift
  "$bin/gpulab-conformance" compare "${base[@]}" "${compare_flags[@]}" "$@" >"$out/$name.txt" 2>&1 || rc=$?
  case $rc in
    0) echo "$name: no regression" ;;
    1) echo "$name: REGRESSION flagged" ;;
    *) echo "$name: compare refused (exit $rc), see $out/$name.txt" >&2; return 2 ;;
  esac
  return $rc
}

shuffled() { # shuffled SEED N: 0..N-1 in an order fixed by SEED
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); for (i = 0; i < n; i++) a[i] = i
    for (i = n - 1; i > 0; i--) { j = int(rand() * (i + 1)); t = a[i]; a[i] = a[j]; a[j] = t }
    for (i = 0; i < n; i++) print a[i] }'
}

sorted() { printf '%s\n' "$@" | sort -n | tr '\n' ' '; }

alarms=0 hits=0
nu=${#U[@]} np=${#P[@]}
declare -A drawn=()
once() { # once KEY K: stop if an earlier comparison drew KEY
  if [[ -n "${drawn[$1]:-}" ]]; then
    echo "noise-check: comparison $2 draws the same runs as comparison ${drawn[$1]}" >&2
    exit 2
  fi
  drawn[$1]=$2
}
for ((k = 0; k < comparisons; k++)); do
  mapfile -t u < <(shuffled $((1 + k)) "$nu")
  mapfile -t p < <(shuffled $((1001 + k)) "$np")
  once "false-alarm $(sorted "${u[@]:0:3}")vs $(sorted "${u[@]:3:3}")" "$k"
  once "power $(sorted "${u[@]:0:3}")vs $(sorted "${p[@]:0:3}")" "$k"
  rc=0
  draw "false-alarm-$k" "${U[${u[0]}]}" "${U[${u[1]}]}" "${U[${u[2]}]}" -- "${U[${u[3]}]}" "${U[${u[4]}]}" "${U[${u[5]}]}" || rc=$?
  ((rc == 2)) && exit 2
  ((rc == 1)) && alarms=$((alarms + 1))
  rc=0
  draw "power-$k" "${U[${u[0]}]}" "${U[${u[1]}]}" "${U[${u[2]}]}" -- "${P[${p[0]}]}" "${P[${p[1]}]}" "${P[${p[2]}]}" || rc=$?
  ((rc == 2)) && exit 2
  ((rc == 1)) && hits=$((hits + 1))
done
printf '\nnoise-check: pool %d unchanged + %d planted runs (delay %s, scale %d)\n' "$nu" "$np" "$delay" "$scale"
printf 'compare flags: %s\n' "${compare_flags[*]:-(none)}"
printf 'false alarms: %d of %d comparisons\npower: %d of %d comparisons flagged the planted slowdown\n' "$alarms" "$comparisons" "$hits" "$comparisons"
