#!/usr/bin/env bash
# Builds the libFuzzer targets (the asan preset: clang, address + undefined sanitizers; the same
# build runs the C++ suites under the sanitizers) and runs each one for N seconds (default 60)
# with a fixed seed, starting from the committed corpus fuzz/corpus/<op>/. New inputs go to
# build/asan/fuzz/corpus/<op>/ (the committed corpus is only read); a crash leaves its input in
# build/asan/fuzz/artifacts/ and fails the script.
#
#   scripts/fuzz.sh [seconds]               every target, as many at once as there are cores
#   FUZZ_TARGETS="kv_cache_update" scripts/fuzz.sh 600
#
# Long campaigns: see README ("Reliability") and docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=${FUZZ_JOBS:-$(nproc)}
targets=${FUZZ_TARGETS:-"scatter_pa_kv_cache scatter_pa_kv_cache_with_k_scale kv_compress_epilog kv_cache_update gather_pa_kv_cache scatter_pa_cache indexer_quant_cache paged_kv_write paged_cache_gather paged_latent_write"}

cmake --preset asan >/dev/null
cmake --build build/asan -j"$(nproc)" --target kvscatter_fuzz_targets
out=build/asan/fuzz

mkdir -p $out/artifacts $out/logs
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Each run records its exit status in a file, so the status survives however it is reaped.
run_one() {
  local op=$1 rc=0
  mkdir -p "$out/corpus/$op"
  "$out/${op}_fuzz" "$out/corpus/$op" "fuzz/corpus/$op" \
    -seed=1 -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$op-" >"$out/logs/$op.log" 2>&1 || rc=$?
  echo "$rc" >"$out/logs/$op.rc"
}

failed=0
for op in $targets; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  echo "fuzz: $op for ${seconds}s"
  rm -f "$out/logs/$op.rc"
  run_one "$op" &
done
wait
for op in $targets; do
  if [ "$(cat "$out/logs/$op.rc" 2>/dev/null)" = 0 ]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/logs/$op.log")
    echo "fuzz: $op ok ($runs runs)"
  else
    failed=1
    echo "fuzz: $op FAILED; log $out/logs/$op.log, inputs in $out/artifacts/"
    tail -n 60 "$out/logs/$op.log"
  fi
done
exit $failed
