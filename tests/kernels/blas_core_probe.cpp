// What a program that links the CPU kernels finds in main, for blas_core_test: its arguments, its
// process name, how many CPUs OpenMP found at its start (before it pins anything), its open fds
// and OpenBLAS's kernel set, one per line.
// Where OpenBLAS fell back to its SSE3 kernels, blas_core.cpp ran this program a second time
// before main; the test holds what it prints to what the first run was given.
#include <dirent.h>
#include <omp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kernels/cpu/blas_core.h"

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) std::printf("arg[%s]\n", argv[i]);
  char name[17] = {};
  prctl(PR_GET_NAME, name);
  std::printf("name %s\n", name);
  std::printf("cpus %d\n", omp_get_num_procs());
  if (DIR* d = opendir("/proc/self/fd")) {
    const int own = dirfd(d);
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.' || std::stoi(e->d_name) == own) continue;
      char target[256] = {};
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      (void)!readlink(link.c_str(), target, sizeof target - 1);
      std::printf("fd %s %s\n", e->d_name, target);
    }
    closedir(d);
  }
  std::printf("blas %s\n", azr::kernels::blas_core_description().c_str());
  return 0;
}
