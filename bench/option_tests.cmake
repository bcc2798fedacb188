# azr_bench_rejects(<target> <pattern> <args...>): a test that runs the benchmark with a bad
# command line and passes when it exits non-zero, before any device work (so with or without a
# GPU), with a message that matches <pattern> (grep -E): CLI11's, naming the option.
include_guard(GLOBAL)
function(azr_bench_rejects target pattern)
  string(MAKE_C_IDENTIFIER "${ARGN}" case)
  string(CONCAT script "out=$(\"$0\" \"$@\" 2>&1); rc=$?; echo \"exit $rc: $out\"; "
                       "[ $rc -ne 0 ] && echo \"$out\" | grep -Eq -- '${pattern}'")
  add_test(NAME ${target}.Rejects${case} COMMAND sh -c "${script}" $<TARGET_FILE:${target}> ${ARGN})
endfunction()
