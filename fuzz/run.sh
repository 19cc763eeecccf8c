#!/usr/bin/env bash
# Runs the fuzz targets on the stable toolchain, one after another.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60); the targets (default: all of
# fuzz/Cargo.toml). Installs cargo-fuzz when missing. libFuzzer needs
# nightly-only flags (-Z sanitizer, -C passes=sancov-module), which stable
# accepts with RUSTC_BOOTSTRAP=1. Each target runs in one process (the
# machine is shared) on fuzz/corpus/TARGET, the corpus is then minimised
# in place (cargo fuzz cmin), and its figures printed: executions, the
# final cov/ft libFuzzer reports, and the crash files it left in
# fuzz/artifacts/TARGET. Logs: fuzz/target/logs/TARGET.log.
#
# Environment: SANITIZER (default none: the targets are safe Rust, and
# without ASan they run several times faster; `address` to use it),
# FUZZ_ARGS (more libFuzzer flags), CMIN=0 to skip the minimisation.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

secs=${1:-60}
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^roce-fuzz$')
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
san=${SANITIZER:-none}
# -a: debug assertions (overflow checks) on in the release build.
fz=(-s "$san" -a)

mkdir -p fuzz/target/logs
summary=fuzz/target/logs/summary.txt
printf '%-14s %10s %8s %8s %6s %6s %s\n' target execs cov ft corpus secs crashes | tee "$summary"
status=0
for t in "${targets[@]}"; do
  corpus=$root/fuzz/corpus/$t
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  log=fuzz/target/logs/$t.log
  before=$(find "fuzz/artifacts/$t" -type f | wc -l)
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! cargo fuzz run "${fz[@]}" "$t" "$corpus" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1; then
    status=1
  fi
  took=$(( $(date +%s) - start ))
  if [ "${CMIN:-1}" != 0 ]; then
    cargo fuzz cmin "${fz[@]}" "$t" "$corpus" >"fuzz/target/logs/$t.cmin.log" 2>&1 ||
      echo "$t: cmin failed, see fuzz/target/logs/$t.cmin.log" >&2
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: [0-9]+' | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  files=$(find "$corpus" -type f | wc -l)
  crashes=$(( $(find "fuzz/artifacts/$t" -type f | wc -l) - before ))
  printf '%-14s %10s %8s %8s %6s %6s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$files" "$took" "$crashes" | tee -a "$summary"
  if [ "$crashes" -gt 0 ]; then
    ls -t "fuzz/artifacts/$t" | head -n "$crashes" | sed "s|^|  new artifact: fuzz/artifacts/$t/|"
    grep -m1 -E "panicked at|ERROR: libFuzzer" "$log" | sed 's/^/  /' || true
  fi
done
exit $status
