# Decode and training speed of the model on a device against Hugging Face transformers
# (bench/hf_speed_baseline.py) and the hardware's bounds. Included by bench/CMakeLists.txt and,
# for AZR_GPU_CHECKS_ONLY builds, by the top-level CMakeLists.txt.
add_executable(model_speed_bench ${CMAKE_SOURCE_DIR}/bench/model_speed_bench.cpp)
target_link_libraries(model_speed_bench PRIVATE azr_model azr_backend CLI11::CLI11
                      nlohmann_json::nlohmann_json)
# cblas.h for its host read (measured_read_bandwidth), where kernels/ found it: on the GPU machine
# the carried packages are unpacked without the symlink Debian's install script makes.
target_include_directories(model_speed_bench PRIVATE ${CMAKE_SOURCE_DIR} ${AZR_OPENBLAS_INCLUDE})
target_compile_definitions(model_speed_bench PRIVATE AZR_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

# The LM head's column-block tiles against the row blocks azr used before, on any device.
add_executable(lm_head_bench ${CMAKE_SOURCE_DIR}/bench/lm_head_bench.cpp)
target_link_libraries(lm_head_bench PRIVATE azr_model azr_backend CLI11::CLI11
                      nlohmann_json::nlohmann_json)
target_include_directories(lm_head_bench PRIVATE ${CMAKE_SOURCE_DIR})

# Generation of identical prompts (learnability rollouts, pass@k): each distinct prompt prefilled
# once against every copy computed, on any device.
add_executable(duplicate_prompts_bench ${CMAKE_SOURCE_DIR}/bench/duplicate_prompts_bench.cpp)
target_link_libraries(duplicate_prompts_bench PRIVATE azr_model azr_backend CLI11::CLI11
                      nlohmann_json::nlohmann_json)
target_include_directories(duplicate_prompts_bench PRIVATE ${CMAKE_SOURCE_DIR})

include(${CMAKE_SOURCE_DIR}/bench/option_tests.cmake)
azr_bench_rejects(model_speed_bench "--new: Value 1 not in range" --new 1)
azr_bench_rejects(model_speed_bench "--matmul-precision: fp16 not in" --matmul-precision bf16,fp16)
azr_bench_rejects(model_speed_bench "--decode-batches: Value x not in range" --decode-batches 1,x)
azr_bench_rejects(model_speed_bench "--device: tpu not in" --device tpu)
azr_bench_rejects(model_speed_bench "not expected: --no-such" --no-such)
azr_bench_rejects(model_speed_bench "--profile-range: the profilers. range is CUDA.s; --device is cpu"
                  --device cpu --profile-range)
azr_bench_rejects(model_speed_bench "--ahead-sweep: a tuning of the CUDA decode step; --device is cpu"
                  --device cpu --ahead-sweep)
azr_bench_rejects(lm_head_bench "--seq: Value 1 not in range" --seq 1)
azr_bench_rejects(lm_head_bench "--threads" --threads)
azr_bench_rejects(duplicate_prompts_bench "--copies: Value 0 not in range" --copies 0)
azr_bench_rejects(duplicate_prompts_bench "--repeats: Value 2.5 not in range" --repeats 2.5)
