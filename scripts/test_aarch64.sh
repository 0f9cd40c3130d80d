#!/usr/bin/env bash
# The aarch64 stage of scripts/test.sh: cross-builds kvscatter for 64-bit Arm (preset aarch64,
# Debian's aarch64-linux-gnu toolchain) and runs it under qemu-aarch64 once per emulated CPU
# below. Each CPU makes a different Highway target the best one, and `kvscatter info` must name
# exactly the expected best target and runnable set, so every Arm target is proven in use:
#
#   SVE2_128  SVE2 with 128-bit vectors (best at 128 bits)
#   SVE_256   SVE with 256-bit vectors (best at 256 bits, SVE2 or not)
#   SVE2      SVE2 at 2048 bits
#   SVE       SVE without SVE2 (A64FX, 512 bits)
#   NEON      no SVE (Cortex-A76)
#
# The scalable SVE2 target is also pinned at 128 and 256 bits (under the first two CPUs), and
# SVE at 128, 256, 512 and 2048, so both run from the shortest vectors to the longest.
#
# Under each CPU it runs the suites labelled `simd` (the optimized-versus-reference tests of
# every operator and mode; several loop over every runnable target, pinning each in turn, so
# NEON, SVE and SVE2 are also checked at each vector length), replays the committed fuzz corpora
# and runs a small `kvscatter demo`. harness_test runs its cases at 1 and 3 threads here (1, 2
# and 3 on x86): the rows split among threads the same way on every target. The C ABI tests and
# the example run once. The rest of the suite under QEMU (thread-pool and concurrency suites,
# slow there and not target-specific):
#   QEMU_CPU=max ctest --preset aarch64 -j2
#
#   scripts/test_aarch64.sh                 build and run every CPU below
#   AARCH64_CPUS="cortex-a76 a64fx" scripts/test_aarch64.sh    only those (names as below)
#   AARCH64_SUITES="kv_cache_update_test" scripts/test_aarch64.sh  only those suites
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
start=$SECONDS
step() { echo "-- aarch64: $* (at $((SECONDS - start)) s)"; }

# name | QEMU_CPU | best target `kvscatter info` must report | every runnable target, best first
# | targets the target-looping tests leave to another CPU (KVSCATTER_TEST_SKIP_TARGETS): the same
# code at the same vector length. NEON is 128 bits under every CPU, so it is pinned under two
# (sve2-128, and cortex-a76 where it is the best); SVE at 512 bits is pinned under a64fx only.
cpus=(
  "sve2-128|max,sve-default-vector-length=16|SVE2_128|SVE2_128 SVE2 SVE NEON|"
  "sve-256|max,sve-default-vector-length=32|SVE_256|SVE_256 SVE2 SVE NEON|NEON"
  "sve2-2048|max,sve-default-vector-length=256|SVE2|SVE2 SVE NEON|NEON"
  "a64fx|a64fx|SVE|SVE NEON|NEON"
  "cortex-a76|cortex-a76|NEON|NEON|"
)
# The `simd` label of tests/CMakeLists.txt; harness_test runs every operator's cases on every
# runnable target (at the thread counts set below).
suites=(harness_test formats_test gather_pa_kv_cache_test indexer_quant_cache_test
        kv_cache_update_test kv_compress_epilog_test scatter_pa_cache_test
        scatter_pa_kv_cache_examples_test scatter_pa_kv_cache_with_k_scale_test)
if [ -n "${AARCH64_SUITES:-}" ]; then read -ra suites <<<"$AARCH64_SUITES"; fi
fuzz_ops=()
for f in fuzz/*_fuzz.cc; do f=${f#fuzz/}; fuzz_ops+=("${f%_fuzz.cc}"); done
c_tests=(c_c_api_test c_kv_cache_update_test c_quant_ops_test c_scatter_pa_kv_cache_test
         c_header_cxx_test)

step "cross build"
cmake --preset aarch64 >/dev/null
cmake --build build/aarch64 -j"$jobs" --target kvscatter_cli "${suites[@]}" "${c_tests[@]}" \
  $(printf '%s_fuzz_replay ' "${fuzz_ops[@]}")
build_s=$((SECONDS - start))

qemu=(nice -n 10 qemu-aarch64)  # no -L: see cmake/toolchains/aarch64-linux-gnu.cmake
b=build/aarch64
logs=$b/qemu-logs
rm -rf $logs
mkdir -p $logs
failed=()
# label, command...: runs in the background under the current QEMU_CPU, as many at once as
# there are cores; the log, exit status and seconds land in $logs/<cpu>.<label>.*
run() {
  local label=$1 base=$logs/$cpu_name.$1
  shift
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  (
    t=$SECONDS
    rc=0
    "${qemu[@]}" "$@" >"$base.log" 2>&1 || rc=$?
    echo "$rc" >"$base.rc"
    echo "$((SECONDS - t)) $cpu_name.$label" >>$logs/seconds
  ) &
}
collect() {  # waits for the runs started so far; records the failed ones
  wait
  local rcfile
  for rcfile in $logs/*.rc; do
    [ -e "$rcfile" ] || continue
    if [ "$(cat "$rcfile")" != 0 ]; then
      failed+=("${rcfile%.rc} (log ${rcfile%.rc}.log)")
      tail -n 30 "${rcfile%.rc}.log"
    fi
    mv "$rcfile" "$rcfile.seen"
  done
}

step "C ABI tests, exported symbols and the installed example (QEMU_CPU=max)"
export QEMU_CPU=max cpu_name=max
for t in "${c_tests[@]}"; do run "$t" $b/tests/c/$t; done
ctest --test-dir $b -R '^c_api_(exports|example_installed)$' --output-on-failure >/dev/null ||
  failed+=("c_api_exports / c_api_example_installed")

selected=()
for entry in "${cpus[@]}"; do
  IFS='|' read -r cpu_name cpu best runnable skip <<<"$entry"
  if [ -n "${AARCH64_CPUS:-}" ] && [[ " $AARCH64_CPUS " != *" $cpu_name "* ]]; then continue; fi
  selected+=("$entry")
  step "$cpu_name (QEMU_CPU=$cpu): expecting $best${skip:+; $skip pinned under another CPU}"
  info=$(QEMU_CPU=$cpu "${qemu[@]}" $b/tools/kvscatter info)
  got_best=$(sed -n 's/^simd target: //p' <<<"$info")
  got_runnable=$(sed -n 's/^simd targets available: //p' <<<"$info")
  if [ "$got_best" != "$best" ] || [ "$got_runnable" != "$runnable" ]; then
    failed+=("$cpu_name: kvscatter info reports '$got_best' of '$got_runnable'," \
             "expected '$best' of '$runnable'")
  fi
done

# One queue for every CPU's runs, no wait between CPUs: harness_test, the longest run under each
# CPU (a minute or two), goes first for all of them, and the short runs fill the cores after.
step "the suites, fuzz replays and demo under each CPU, $jobs at a time"
for pass in long short; do
  for entry in "${selected[@]}"; do
    IFS='|' read -r cpu_name cpu best runnable skip <<<"$entry"
    export QEMU_CPU=$cpu KVSCATTER_TEST_SKIP_TARGETS=$skip KVSCATTER_TEST_THREADS=1,3
    for s in "${suites[@]}"; do
      if [ "$s" = harness_test ] && [ $pass = short ]; then continue; fi
      if [ "$s" != harness_test ] && [ $pass = long ]; then continue; fi
      run "$s" $b/tests/$s --gtest_filter=-*Exhaustive*
    done
    [ $pass = long ] && continue
    for op in "${fuzz_ops[@]}"; do
      run "fuzz_replay_$op" $b/fuzz/${op}_fuzz_replay fuzz/corpus/$op
    done
    run demo $b/tools/kvscatter --threads 2 demo --layers 2 --batch 2 --prompt 24 --generate 4 \
      --paged-layers 2 --paged-steps 6 --quant-layers 1 --quant-batch 2 --quant-prompt 16 \
      --quant-generate 2
  done
done
collect

echo "-- aarch64: slowest runs (s): $(sort -rn $logs/seconds | head -n 8 | tr '\n' ';')"
per_cpu=$(awk '{split($2, n, "."); s[n[1]] += $1} END {for (c in s) printf " %s %d s;", c, s[c]}' \
  $logs/seconds)
echo "-- aarch64: build ${build_s} s; run seconds per CPU:$per_cpu total $((SECONDS - start)) s"
if ((${#failed[@]})); then
  printf 'aarch64 FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "aarch64: every Arm target passed (suites: ${suites[*]}; fuzz replay; demo)"
