# azr_trainer_dist: launch detection and host collectives (single / MPI / TCP), plus NCCL for
# GPU buffers where CUDA and NCCL exist.
# Without MPI and NCCL; tests/trainer/dist.cmake also builds these alone, as -DAZR_MPI=OFF would.
set(AZR_TRAINER_DIST_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/dist.cpp ${CMAKE_CURRENT_SOURCE_DIR}/dist_tcp.cpp
    CACHE INTERNAL "azr_trainer_dist's sources without MPI and NCCL")
add_library(azr_trainer_dist STATIC ${AZR_TRAINER_DIST_SOURCES})
target_include_directories(azr_trainer_dist PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(azr_trainer_dist PUBLIC Threads::Threads)
if(AZR_MPI)  # (CMakeLists.txt)
  target_sources(azr_trainer_dist PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/dist_mpi.cpp)
  target_link_libraries(azr_trainer_dist PUBLIC MPI::MPI_C)
  target_compile_definitions(azr_trainer_dist PUBLIC AZR_HAVE_MPI=1)
endif()

# NCCL ships outside the CUDA toolkit (pip wheels, NGC images, /usr/lib), so look in the usual
# places and NCCL_HOME / NCCL_ROOT. Consumers test AZR_HAVE_NCCL before including dist_nccl.h;
# the CMake variable of the same name (0/1) tells the test tree what `azr --version` should list.
# AZR_NCCL=OFF leaves it out where it exists: scripts/gpu_prebuild.sh's azr for a one-GPU machine
# that may lack NCCL's 220 MB library.
option(AZR_NCCL "Build the NCCL all-reduce where CUDA and NCCL are found" ON)
set(AZR_HAVE_NCCL 0 CACHE INTERNAL "whether azr_trainer_dist has the NCCL all-reduce")
if(AZR_HAVE_CUDA AND AZR_NCCL)
  find_package(CUDAToolkit)
  find_path(AZR_NCCL_INCLUDE_DIR nccl.h
    HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(AZR_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND AZR_NCCL_INCLUDE_DIR AND AZR_NCCL_LIBRARY)
    target_sources(azr_trainer_dist PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/dist_nccl.cpp)
    target_include_directories(azr_trainer_dist PUBLIC ${AZR_NCCL_INCLUDE_DIR})
    target_link_libraries(azr_trainer_dist PUBLIC CUDA::cudart ${AZR_NCCL_LIBRARY})
    target_compile_definitions(azr_trainer_dist PUBLIC AZR_HAVE_NCCL=1)
    set(AZR_HAVE_NCCL 1 CACHE INTERNAL "whether azr_trainer_dist has the NCCL all-reduce")
    message(STATUS "azr: NCCL found (${AZR_NCCL_LIBRARY})")
  else()
    message(WARNING "azr: CUDA found but NCCL (nccl.h / libnccl) or the CUDA runtime was not; "
                    "building without GPU all-reduce (set NCCL_HOME to point at NCCL)")
  endif()
endif()
