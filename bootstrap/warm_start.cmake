# The warm start: task transcripts and supervised training of a new tiny model (bootstrap/warm_start.h).
add_library(azr_bootstrap_warm STATIC ${CMAKE_CURRENT_SOURCE_DIR}/transcripts.cpp ${CMAKE_CURRENT_SOURCE_DIR}/warm_start.cpp)
target_include_directories(azr_bootstrap_warm PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_bootstrap_warm PUBLIC azr_model azr_tokenizer azr_proposer_text azr_solver_text azr_buffer)
