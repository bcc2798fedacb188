# The warm start: transcripts parsed back by the real parsers and graded in the real sandbox, and
# supervised training of azr-tiny on them (bootstrap/warm_start.h).
azr_sandbox_test(bootstrap_warm_start_test bootstrap/warm_start_test.cpp)
target_link_libraries(bootstrap_warm_start_test PRIVATE azr_bootstrap_warm azr_proposer_validate azr_solver_grade)
