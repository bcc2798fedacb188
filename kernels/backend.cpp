#include "kernels/backend.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/guarded/guarded_ops.h"
#ifdef AZR_HAVE_CUDA_KERNELS
#include "kernels/cuda/cuda_ops.h"
#endif

namespace azr::kernels {

#ifdef AZR_HAVE_CUDA_KERNELS
namespace {

// The GPUs this process can use; none is the usage error every "cuda" entry point gives.
int usable_gpus() {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) throw std::invalid_argument("device 'cuda': no usable GPU (" + why + ")");
  return n;
}

}  // namespace
#endif

std::vector<std::string> backend_names() {
#ifdef AZR_HAVE_CUDA_KERNELS
  return {"cpu", "cuda", "cpu-guarded"};
#else
  return {"cpu", "cpu-guarded"};
#endif
}

const Ops& backend_ops(std::string_view device, int device_index, MatmulPrecision precision) {
  const bool bf16 = precision == MatmulPrecision::Bf16;
  if (device == "cpu") return bf16 ? cpu_bf16_matmul_ops() : cpu_ops();
  if (device == "cpu-guarded") return guarded_cpu_ops(precision);
  if (device == "cuda") {
#ifdef AZR_HAVE_CUDA_KERNELS
    cuda_select_device(device_index % usable_gpus());
    // AZR_CUDA_ATTENTION, AZR_CUDA_ATTENTION_WARP_ROWS, AZR_CUDA_ATTENTION_BACKWARD, AZR_CUDA_PDL,
    // AZR_CUDA_DECODE_LAYERS and AZR_CUDA_GRADIENT_SUMS are read here, so a bad value stops the
    // command before any work, not at its first attention call, decode step or backward.
    if (bf16) {
      (void)cuda_attention_kernel();
      (void)cuda_attention_warp_rows();
      (void)cuda_attention_backward();
    }
    (void)cuda_programmatic_launch();
    (void)cuda_decode_layers_persistent();
    (void)cuda_gradient_sums_ordered();
    return bf16 ? cuda_bf16_matmul_ops() : cuda_ops();
#else
    (void)device_index;
    throw std::invalid_argument(
        "device 'cuda': this azr was built without the CUDA backend (nvcc was not found when it was configured)");
#endif
  }
  std::string known;
  for (const std::string& name : backend_names()) known += (known.empty() ? "" : ", ") + name;
  throw std::invalid_argument("unknown device '" + std::string(device) + "' (known: " + known + ")");
}

std::string reproducibility_note(std::string_view device) {
  if (device != "cuda") return "";
#ifdef AZR_HAVE_CUDA_KERNELS
  std::string varying;
  auto add = [&](bool set, const char* setting) {
    if (set) varying += (varying.empty() ? "" : ", ") + std::string(setting);
  };
  add(!cuda_gradient_sums_ordered(), "AZR_CUDA_GRADIENT_SUMS=atomic");
  add(cuda_attention_backward() == CudaAttentionBackward::Merged, "AZR_CUDA_ATTENTION_BACKWARD=merged");
  add(cuda_cublaslt_autotune(), "AZR_CUBLASLT_AUTOTUNE=1");
  if (varying.empty()) return "bits: a training step's are the same every run on this GPU model and CUDA version";
  return "bits: a training step's vary from run to run (" + varying + ")";
#else
  return "";
#endif
}

bool device_usable(std::string_view device, std::string* why) {
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), device) == names.end()) {
    *why = "unknown device '" + std::string(device) + "'";
    return false;
  }
#ifdef AZR_HAVE_CUDA_KERNELS
  if (device == "cuda") return cuda_device_count(why) > 0;
#endif
  return true;
}

int ranks_sharing(int local_rank, int local_ranks, int devices) {
  if (devices < 1 || local_ranks < 1 || local_rank < 0 || local_rank >= local_ranks)
    throw std::invalid_argument("ranks_sharing: local rank " + std::to_string(local_rank) + " of " +
                                std::to_string(local_ranks) + " over " + std::to_string(devices) + " devices");
  const int first = local_rank % devices;  // the lowest local rank on this device
  return (local_ranks - 1 - first) / devices + 1;
}

double device_memory_bytes(std::string_view device, int device_index, int local_ranks) {
  (void)backend_ops(device, device_index);  // the same errors for an unknown or unusable device
  const int ranks = std::max(local_ranks, 1);
#ifdef AZR_HAVE_CUDA_KERNELS
  if (device == "cuda") {
    const int gpus = cuda_device_count();
    return cuda_total_memory(device_index % gpus) / ranks_sharing(device_index % ranks, ranks, gpus);
  }
#endif
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / ranks;  // all on the one device
}

void* device_stream(std::string_view device) {
#ifdef AZR_HAVE_CUDA_KERNELS
  // Not through backend_ops: that would make GPU 0 current, and a rank runs on its local GPU.
  if (device == "cuda") {
    (void)usable_gpus();
    return cuda_op_stream();
  }
#endif
  (void)backend_ops(device);  // the same errors for an unknown device, or "cuda" without the backend
  return nullptr;
}

std::vector<std::string> matmul_precision_names() { return {"fp32", "bf16"}; }

MatmulPrecision parse_matmul_precision(std::string_view name) {
  if (name == "fp32") return MatmulPrecision::Fp32;
  if (name == "bf16") return MatmulPrecision::Bf16;
  throw std::invalid_argument("unknown matmul precision '" + std::string(name) + "' (known: fp32, bf16)");
}

const char* matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::Bf16 ? "bf16" : "fp32"; }

MatmulPrecision resolve_matmul_precision(std::string_view name, std::string_view device) {
  if (name == "auto") return device == "cuda" ? MatmulPrecision::Bf16 : MatmulPrecision::Fp32;
  if (name == "fp32" || name == "bf16") return parse_matmul_precision(name);
  throw std::invalid_argument("unknown matmul precision '" + std::string(name) + "' (known: auto, fp32, bf16)");
}

}  // namespace azr::kernels
