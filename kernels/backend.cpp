#include "kernels/backend.h"

#include <stdexcept>

#include "kernels/guarded/guarded_ops.h"
#ifdef AZR_HAVE_CUDA_KERNELS
#include "kernels/cuda/cuda_ops.h"
#endif

namespace azr::kernels {

std::vector<std::string> backend_names() {
#ifdef AZR_HAVE_CUDA_KERNELS
  return {"cpu", "cuda", "cpu-guarded"};
#else
  return {"cpu", "cpu-guarded"};
#endif
}

const Ops& backend_ops(std::string_view device, int device_index) {
  if (device == "cpu") return cpu_ops();
  if (device == "cpu-guarded") return guarded_cpu_ops();
  if (device == "cuda") {
#ifdef AZR_HAVE_CUDA_KERNELS
    std::string why;
    const int n = cuda_device_count(&why);
    if (n == 0) throw std::invalid_argument("device 'cuda': no usable GPU (" + why + ")");
    cuda_select_device(device_index % n);
    return cuda_ops();
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

}  // namespace azr::kernels
