# `azr train` through the real binary: resume, kill -9, Ctrl-C, mpirun -np 2, bad input.
azr_cli_test(train_cli_test trainer/train_cli_test.cpp)
target_link_libraries(train_cli_test PRIVATE azr_model)
target_compile_definitions(train_cli_test PRIVATE AZR_EXPECT_MPI=$<BOOL:${AZR_MPI}>)
# A disk that fails a checkpoint's write, through the fsync fault of the durability tests' preload.
add_dependencies(train_cli_test azr_sync_log)
target_compile_definitions(train_cli_test PRIVATE AZR_SYNC_LOG_LIB="$<TARGET_FILE:azr_sync_log>")
# One step in process: real sandbox and buffer, scripted responses (a new model writes no valid task).
azr_sandbox_test(trainer_step_test trainer/step_test.cpp)
target_link_libraries(trainer_step_test PRIVATE azr_trainer)
# `azr bootstrap` through the real binary (small), and self-play starting from its model.
azr_cli_test(bootstrap_cli_test trainer/bootstrap_cli_test.cpp)
# Checkpoint files: a failed sync is an error, a failed write leaves nothing, pruning is whole.
azr_test(trainer_checkpoint_test trainer/checkpoint_test.cpp)
target_link_libraries(trainer_checkpoint_test PRIVATE azr_trainer)
# Policy::update: the PPO ratio's old log-probs, the sampler's or the learner's own.
azr_test(trainer_policy_test trainer/policy_test.cpp)
target_link_libraries(trainer_policy_test PRIVATE azr_trainer)
