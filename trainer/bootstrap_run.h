#pragma once
// `azr bootstrap CONFIG`: a new model learns the task formats from generated programs (zero
// human data) and is saved, with its held-out set and a report, where self-play can start from
// it (model.path). The config is a training config; the [bootstrap] section drives this step.
#include <string>
#include <vector>

#include "trainer/model_setup.h"

namespace azr::trainer {

struct BootstrapOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string output;                  // --output (wins over bootstrap.output)
};

// Errors the user can fix (config, an output that already holds a model) throw UserError.
int bootstrap(const BootstrapOptions& options);

}  // namespace azr::trainer
