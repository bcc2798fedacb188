#pragma once
// The banned-word list: shown in the deduction/abduction proposer prompts and matched against
// each dotted component of import statements (azr-reference §4.2).
#include <string>
#include <vector>

namespace azr::proposer {

// METHOD.md's list: the reference config's `banned_words` (§4.2) without its duplicate
// `datetime` and without the dotted entries (os.sys, os.path, sys.exit, os.environ), which can
// never equal a single component and so are no-ops in the reference's check.
inline std::vector<std::string> default_banned_words() {
  return {"logging", "random", "multiprocessing", "pebble", "subprocess", "threading",
          "datetime", "time",  "hashlib",         "hmac",   "bcrypt",     "calendar"};
}

}  // namespace azr::proposer
