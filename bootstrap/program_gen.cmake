# The program generator (bootstrap/program_gen.h): random small Python functions and their inputs,
# turned into tasks by the sandbox.
add_library(azr_bootstrap_gen STATIC ${CMAKE_CURRENT_SOURCE_DIR}/program_gen.cpp)
target_include_directories(azr_bootstrap_gen PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_bootstrap_gen PUBLIC azr_proposer_validate azr_buffer azr_sandbox)
