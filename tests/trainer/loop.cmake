# `azr train` through the real binary: resume, kill -9, Ctrl-C, mpirun -np 2, bad input.
azr_cli_test(train_cli_test trainer/train_cli_test.cpp)
target_link_libraries(train_cli_test PRIVATE azr_model)
