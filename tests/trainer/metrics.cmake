# Metrics sinks: CRC-32C against RFC 3720 vectors, event files read back by an independent
# Python reader (tests/trainer/read_tfevents.py, google.protobuf), JSONL and the console view.
azr_test(trainer_metrics_test trainer/metrics_test.cpp)
target_link_libraries(trainer_metrics_test PRIVATE azr_trainer_metrics)
