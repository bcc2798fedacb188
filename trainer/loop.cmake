# azr_trainer: the self-play loop (step.cpp), the policy (policy.cpp), checkpoints and the run
# (trainer.cpp).
#
# The checkpoint directory's files (checkpoint.h) on their own: safetensors_bench times the
# checksums without the rest of the trainer.
add_library(azr_trainer_checkpoint STATIC ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint.cpp)
target_include_directories(azr_trainer_checkpoint PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_checkpoint PUBLIC nlohmann_json::nlohmann_json)
target_include_directories(azr_trainer_checkpoint PRIVATE ${XXHASH_INCLUDE_DIRS})
add_library(azr_trainer STATIC ${CMAKE_CURRENT_SOURCE_DIR}/policy.cpp ${CMAKE_CURRENT_SOURCE_DIR}/step.cpp
                               ${CMAKE_CURRENT_SOURCE_DIR}/trainer.cpp
                               ${CMAKE_CURRENT_SOURCE_DIR}/model_setup.cpp ${CMAKE_CURRENT_SOURCE_DIR}/eval_setup.cpp
                               ${CMAKE_CURRENT_SOURCE_DIR}/imported_tasks.cpp
                               ${CMAKE_CURRENT_SOURCE_DIR}/run_lock.cpp)
target_include_directories(azr_trainer PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer PUBLIC azr_trainer_checkpoint azr_trainer_config azr_trainer_metrics
                      azr_trainer_dist azr_model azr_tokenizer azr_buffer azr_proposer_text azr_proposer_validate
                      azr_proposer_seeding azr_solver_text azr_solver_grade azr_rewards azr_eval azr_sandbox azr_backend
                      nlohmann_json::nlohmann_json fmt::fmt)

# `azr bootstrap`: the generator and the warm start (bootstrap/) driven by a run config.
add_library(azr_trainer_bootstrap STATIC ${CMAKE_CURRENT_SOURCE_DIR}/bootstrap_run.cpp)
target_include_directories(azr_trainer_bootstrap PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_bootstrap PUBLIC azr_trainer azr_bootstrap_gen azr_bootstrap_warm)
