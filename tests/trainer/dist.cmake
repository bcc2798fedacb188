# Distributed runtime: launch detection + TCP collectives (gtest, forked ranks on localhost),
# and the MPI backend under a real mpirun.
azr_test(trainer_dist_test trainer/dist_test.cpp)
target_link_libraries(trainer_dist_test PRIVATE azr_trainer_dist)

# The backends as -DAZR_MPI=OFF (and no NCCL) builds them, in every build: scripts/gpu_prebuild.sh's
# azr is such a build, and no CI machine builds one whole. Only the suite of backend choice runs
# (DistBackend.*: a build without MPI refuses it, naming --dist tcp); the rest is the same code.
add_library(azr_trainer_dist_nompi STATIC ${AZR_TRAINER_DIST_SOURCES})
target_include_directories(azr_trainer_dist_nompi PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_dist_nompi PUBLIC Threads::Threads)
add_executable(trainer_dist_nompi_test trainer/dist_test.cpp)
target_link_libraries(trainer_dist_nompi_test PRIVATE azr_trainer_dist_nompi GTest::gtest GTest::gtest_main)
target_include_directories(trainer_dist_nompi_test PRIVATE ${CMAKE_SOURCE_DIR})
azr_test_compile(trainer_dist_nompi_test)
gtest_discover_tests(trainer_dist_nompi_test TEST_PREFIX "NoMpi." TEST_FILTER "DistBackend.*" DISCOVERY_TIMEOUT 60)

if(AZR_MPI)  # the MPI backend is optional (CMakeLists.txt)
  add_executable(trainer_dist_mpi_check trainer/dist_mpi_check.cpp)
  target_link_libraries(trainer_dist_mpi_check PRIVATE azr_trainer_dist)
  target_include_directories(trainer_dist_mpi_check PRIVATE ${CMAKE_SOURCE_DIR})

  # The environment that makes Open MPI 4.1 start reliably in CI containers:
  #  - OMPI_ALLOW_RUN_AS_ROOT*: CI runs as root, which mpirun refuses otherwise.
  #  - btl self,vader + single_copy_mechanism=none: vader's default CMA single copy uses
  #    process_vm_readv, which container seccomp/ptrace policies often deny ("Read -1,
  #    expected ..."); plain copy-in/copy-out shared memory needs no such permission. Leaving
  #    the tcp btl out keeps mpirun from probing (possibly absent) network interfaces.
  #  - OMPI_MCA_rmaps_base_oversubscribe: CI boxes may have fewer cores than ranks.
  set(AZR_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1"
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    "OMPI_MCA_btl=self,vader"
    "OMPI_MCA_btl_vader_single_copy_mechanism=none"
    "OMPI_MCA_rmaps_base_oversubscribe=1")
  foreach(np 2 3)  # 3 ranks: with only 2, a + b == b + a and the order check has no teeth
    add_test(NAME trainer_dist_mpi_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} -np ${np} --oversubscribe ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:trainer_dist_mpi_check> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(trainer_dist_mpi_np${np} PROPERTIES
      ENVIRONMENT "${AZR_MPI_TEST_ENV}" TIMEOUT 180)
  endforeach()
endif()
