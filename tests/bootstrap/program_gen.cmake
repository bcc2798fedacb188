# The program generator: CPython itself as the independent truth for every generated program,
# reproducibility, diversity, the difficulty controls, and real tasks from the real sandbox.
azr_sandbox_test(bootstrap_program_gen_test bootstrap/program_gen_test.cpp)
target_link_libraries(bootstrap_program_gen_test PRIVATE azr_bootstrap_gen)
