# Drives the kvscatter program (-DKVSCATTER=<path>) with every numeric or enumerated option just
# outside its bounds: each must be a usage error (exit status 2) whose message names the option,
# printed before anything runs. Then the smallest accepted values run and verify.

set(failures 0)

function(run_cli)
  execute_process(COMMAND ${KVSCATTER} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 300)
  set(rc "${rc}" PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# expect_usage(<text the message must contain> <args...>)
function(expect_usage message)
  run_cli(${ARGN})
  string(FIND "${err}" "${message}" at)
  if(NOT rc EQUAL 2 OR at EQUAL -1 OR NOT out STREQUAL "")
    message(SEND_ERROR "kvscatter ${ARGN}: want exit 2, '${message}' on stderr and nothing on "
                       "stdout; got exit ${rc}\nstderr: ${err}\nstdout: ${out}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  endif()
endfunction()

# expect_ok(<text stdout must contain> <args...>)
function(expect_ok message)
  run_cli(${ARGN})
  set(out "${out}" PARENT_SCOPE)
  string(FIND "${out}" "${message}" at)
  if(NOT rc EQUAL 0 OR at EQUAL -1)
    message(SEND_ERROR "kvscatter ${ARGN}: want exit 0 and '${message}'; got exit ${rc}\n"
                       "stderr: ${err}\nstdout: ${out}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  endif()
endfunction()

# Global option.
expect_usage("--threads: Value 0 not in range 1 to 4096" --threads 0 info)
expect_usage("--threads: Value 4097 not in range 1 to 4096" --threads 4097 info)
expect_usage("--threads: Value abc" --threads abc info)

# kvscatter bench (the sweep).
expect_usage("--tokens: 'abc' is not an integer in [1, 1048576]" bench --tokens abc)
expect_usage("--tokens: '0' is not an integer" bench --tokens 1,0)
expect_usage("--tokens: '1048577' is not an integer" bench --tokens 1048577)
expect_usage("--tokens: '99999999999999999999' is not an integer" bench --tokens 99999999999999999999)
expect_usage("--tokens: '4x' is not an integer" bench --tokens 4x)
expect_usage("--tokens: expected a comma-separated list" bench --tokens ,)
expect_usage("--threads-list: '0' is not an integer in [1, 4096] or 'all'" bench --threads-list 0)
expect_usage("--threads-list: '4097' is not an integer" bench --threads-list 1,4097)
expect_usage("--threads-list: 'most' is not an integer" bench --threads-list most)
expect_usage("--ops: 'no_such_op' matches no workload" bench --ops kv_cache_update,no_such_op)
expect_usage("--reps: Value 0 not in range 1 to 1000" bench --reps 0)
expect_usage("--reps: Value 1001 not in range" bench --reps 1001)
expect_usage("--batch-ms: Value 0.05 not in range" bench --batch-ms 0.05)
expect_usage("--batch-ms: Value 1001 not in range" bench --batch-ms 1001)

# kvscatter bench scatter.
expect_usage("--heads: Value 0 not in range 1 to 1024" bench scatter --heads 0)
expect_usage("--heads: Value 1025 not in range" bench scatter --heads 1025)
expect_usage("--head-size: Value 0 not in range 1 to 8192" bench scatter --head-size 0)
expect_usage("--head-size: Value 8193 not in range" bench scatter --head-size 8193)
expect_usage("--block-size: Value 0 not in range 1 to 4096" bench scatter --block-size 0)
expect_usage("--block-size: Value 4097 not in range" bench scatter --block-size 4097)
expect_usage("--dtype: int64 not in {" bench scatter --dtype int64)
expect_usage("--tokens: '0' is not an integer" bench scatter --tokens 0)
expect_usage("--tokens: 'abc' is not an integer" bench scatter --tokens abc)
expect_usage("--modes: 'norm' is not one of Norm, Nct" bench scatter --modes Norm,norm)
expect_usage("--min-time: Value -1 not in range 0" bench scatter --min-time -1)
expect_usage("--min-time: Value 61 not in range" bench scatter --min-time 61)

# kvscatter bench quant.
expect_usage("--tokens: Value 0 not in range 1 to 4194304" bench quant --tokens 0)
expect_usage("--tokens: Value 4194305 not in range" bench quant --tokens 1,4194305)
expect_usage("--d: Value 64 not in range 128 to 8192" bench quant --d 64)
expect_usage("--d: Value 8256 not in range" bench quant --d 8256)
expect_usage("--d: must be a multiple of 64" bench quant --d 200)
expect_usage("--group: 8 not in {16,32,64}" bench quant --group 8)
expect_usage("--heads: Value 0 not in range 1 to 1024" bench quant --heads 0)
expect_usage("--heads: Value 1025 not in range" bench quant --heads 1025)
expect_usage("--head-size: Value 0 not in range 1 to 65536" bench quant --head-size 0)
expect_usage("--head-size: Value 65537 not in range" bench quant --head-size 65537)
expect_usage("--reps: Value 0 not in range 1 to 1000" bench quant --reps 0)
expect_usage("--reps: Value 1001 not in range" bench quant --reps 1001)

# kvscatter demo: contiguous part.
foreach(spec "--layers;1024" "--kv-heads;1024" "--head-size;4096" "--batch;4096"
             "--prompt;1048576" "--generate;1048576")
  list(GET spec 0 opt)
  list(GET spec 1 hi)
  math(EXPR above "${hi} + 1")
  expect_usage("${opt}: Value 0 not in range 1 to ${hi}" demo ${opt} 0)
  expect_usage("${opt}: Value ${above} not in range" demo ${opt} ${above})
endforeach()
expect_usage("--cache-dtype: int8 not in {float32,bfloat16,float16}" demo --cache-dtype int8)
expect_usage("--layers x --batch x (--prompt + --generate) x --kv-heads x --head-size: "
             demo --layers 64 --batch 64 --prompt 4096)

# kvscatter demo: paged part.
foreach(spec "--paged-layers;256" "--paged-steps;1048576" "--paged-seqs;4096"
             "--paged-blocks;1048576" "--paged-block-size;4096")
  list(GET spec 0 opt)
  list(GET spec 1 hi)
  math(EXPR above "${hi} + 1")
  expect_usage("${opt}: Value 0 not in range 1 to ${hi}" demo ${opt} 0)
  expect_usage("${opt}: Value ${above} not in range" demo ${opt} ${above})
endforeach()
expect_usage("--paged-block-size: Value -4 not in range" demo --paged-block-size -4)
expect_usage("--paged-seed: '-1' is not an integer in [0, 9223372036854775807]" demo --paged-seed -1)
expect_usage("--paged-blocks x --paged-block-size: 69 cache slots, fewer than one sequence needs"
             demo --paged-blocks 69 --paged-block-size 1)
expect_usage("--paged-layers x --paged-blocks x --paged-block-size: "
             demo --paged-layers 2 --paged-blocks 1024 --paged-block-size 1024)

# kvscatter demo: quantized part.
foreach(spec "--quant-layers;1;256" "--quant-batch;1;1024" "--quant-prompt;8;65536"
             "--quant-generate;1;65536")
  list(GET spec 0 opt)
  list(GET spec 1 lo)
  list(GET spec 2 hi)
  math(EXPR below "${lo} - 1")
  math(EXPR above "${hi} + 1")
  expect_usage("${opt}: Value ${below} not in range ${lo} to ${hi}" demo ${opt} ${below})
  expect_usage("${opt}: Value ${above} not in range" demo ${opt} ${above})
endforeach()
expect_usage("--quant-layers x --quant-batch x (--quant-prompt + --quant-generate): "
             demo --quant-layers 256 --quant-batch 1024)

# info names what the kernels' choice of stores starts from.
expect_ok("streaming threshold: 8 MiB written" info)
expect_ok("last-level cache: " info)

# The lower bounds run, and every demo part reports work it verified.
expect_ok("demo: all parts verified against the reference kernels"
          --threads 1 demo --layers 1 --kv-heads 1 --head-size 1 --batch 1 --prompt 1
          --generate 1 --paged-layers 1 --paged-steps 1 --paged-seqs 1 --paged-blocks 70
          --paged-block-size 1 --quant-layers 1 --quant-batch 1 --quant-prompt 8
          --quant-generate 1 --cache-dtype float32)
foreach(part "== contiguous KV cache: 1 layers" "paged demo: 1 layers, 1 steps"
             "block table with gather_pa_kv_cache (Norm and PA_NZ): yes"
             "K, V and scale caches match the reference kernel")
  string(FIND "${out}" "${part}" at)
  if(at EQUAL -1)
    message(SEND_ERROR "kvscatter demo at the lower bounds: '${part}' missing\n${out}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()
expect_ok("Norm" bench scatter --heads 1 --head-size 1 --block-size 1 --tokens 1 --modes Norm
          --min-time 0 --dtype int8)
expect_ok("kv_compress_epilog" bench quant --tokens 1 --d 128 --group 16 --heads 1
          --head-size 1 --reps 1)
expect_ok("swept" bench --ops "kv_cache_update f32->f32 8x128" --tokens 1 --threads-list 1,all
          --reps 1 --batch-ms 0.1)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} kvscatter argument check(s) failed")
endif()
