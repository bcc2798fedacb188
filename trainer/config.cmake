# azr_trainer_config: the TOML run configuration of `azr train` (schema, validation, --set).
add_library(azr_trainer_config STATIC ${CMAKE_CURRENT_SOURCE_DIR}/config.cpp)
target_include_directories(azr_trainer_config PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_config PRIVATE tomlplusplus::tomlplusplus)
