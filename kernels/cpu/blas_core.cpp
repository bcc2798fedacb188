// OpenBLAS reads OPENBLAS_CORETYPE once, in its library constructor, before any of ours run; so
// where its own choice fell back to the SSE3 kernels on a CPU with AVX2 or AVX-512, the process
// runs itself again with the kernel set named, before main. Only that case: a kernel set OpenBLAS
// chose itself, or one the user named, is left alone. Every program that links azr_kernels carries
// this check (kernels/CMakeLists.txt keeps it in the link), so tests, benches and azr compute alike.
//
// What the second run must find as the first did: the kernel's argv, and the CPU mask from before
// libgomp's constructor (under OMP_PROC_BIND or OMP_PLACES it pins the main thread to its first
// place, and execve keeps a mask: the run again would see one CPU), both saved by a .preinit_array
// entry, which runs before every library's constructor; the process name (`ps`, `pgrep azr`),
// which execve of /proc/self/exe would make "exe"; no fd of ours (none is open). The PID, the
// other fds, the signal mask and dispositions are execve's to keep.
#include "kernels/cpu/blas_core.h"

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" char* openblas_get_corename(void);

namespace azr::kernels {
namespace {

constexpr const char* kChosenByAzr = "AZR_OPENBLAS_CORETYPE_CHOSEN";  // the set azr named
constexpr const char* kProcessName = "AZR_OPENBLAS_REEXEC_NAME";      // for the run again only

char** g_argv = nullptr;
cpu_set_t g_cpus;
bool g_have_cpus = false;

void save_start(int argc, char** argv, char**) {
  if (argc > 0) g_argv = argv;
  g_have_cpus = sched_getaffinity(0, sizeof g_cpus, &g_cpus) == 0;
}
[[gnu::used, gnu::section(".preinit_array")]] void (*const kSaveStart)(int, char**, char**) = save_start;

// The kernel set this CPU can run that OpenBLAS 0.3.21 has: SkylakeX needs AVX-512 F/CD/BW/DQ/VL,
// Haswell AVX2 and FMA (libgcc's checks include the OS's support for the wider registers).
// nullptr: none better than what OpenBLAS chose.
const char* better_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SKYLAKEX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "HASWELL";
  return nullptr;
}

void forget_reexec() {
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChosenByAzr);
  unsetenv(kProcessName);
}

bool check_blas_core() {
  if (const char* name = std::getenv(kProcessName)) {  // the run again
    prctl(PR_SET_NAME, name);
    unsetenv(kProcessName);
  }
  // The user's set, or ours already (a marker without it: never twice, whatever happened).
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv(kChosenByAzr) != nullptr) return true;
  const char* name = openblas_get_corename();
  if (name == nullptr || std::strcmp(name, "Prescott") != 0) return true;
  const char* core = better_core();
  if (core == nullptr || g_argv == nullptr) return true;
  char process_name[17] = {};
  prctl(PR_GET_NAME, process_name);
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0 || setenv(kChosenByAzr, core, 1) != 0 ||
      setenv(kProcessName, process_name, 1) != 0) {
    forget_reexec();
    return false;
  }
  if (g_have_cpus) sched_setaffinity(0, sizeof g_cpus, &g_cpus);
  execv("/proc/self/exe", g_argv);
  forget_reexec();  // cannot run again (no /proc): OpenBLAS's choice stands, only slower
  return false;
}

}  // namespace

extern const bool kBlasCoreChecked = check_blas_core();

std::string blas_core_description() {
  const char* name = openblas_get_corename();
  std::string out = name ? name : "unknown";
  const char* chosen = std::getenv(kChosenByAzr);
  const char* named = std::getenv("OPENBLAS_CORETYPE");
  if (chosen && named && std::strcmp(chosen, named) == 0)
    out += " (chosen by azr: OpenBLAS fell back to Prescott on this CPU)";
  return out;
}

}  // namespace azr::kernels
