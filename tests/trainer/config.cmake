# The run configuration: schema defaults, every error class with its file:line:col, --set,
# the to_toml round trip, and every shipped configs/*.toml.
azr_test(trainer_config_test trainer/config_test.cpp)
target_link_libraries(trainer_config_test PRIVATE azr_trainer_config)
# Where configs/ is when the suite runs outside ctest (ctest sets AZR_TESTS_DIR).
target_compile_definitions(trainer_config_test PRIVATE AZR_CONFIGS_DIR="${CMAKE_SOURCE_DIR}/configs")
