# azr_trainer_metrics: the metrics sinks (metrics.jsonl, TensorBoard event files) and the live
# console view of `azr train`.
add_library(azr_trainer_metrics STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/metrics.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tfevents.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/console_view.cpp)
target_include_directories(azr_trainer_metrics PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_metrics PUBLIC nlohmann_json::nlohmann_json fmt::fmt)
