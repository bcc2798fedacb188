#pragma once
// The modules every zygote imports before forking children: the only modules sandboxed code can
// import (a child cannot open files, so nothing else loads). Header-only, so parts that start a
// pool with extra modules (eval's code benchmarks add hashlib) extend this list instead of
// copying it.
#include <string>
#include <vector>

namespace azr::sandbox {

// Modules every child finds already imported. Importing anything else fails inside the
// sandbox (opening files is denied), so this list is the standard library a program may use.
// Never add modules that reach outside the process (ctypes, socket, subprocess, mmap, resource,
// multiprocessing): seccomp would stop them, but a smaller attack surface is cheaper.
inline const std::vector<std::string>& default_preimports() {
  // Chosen for what small pure functions use, weighed against heap size (every page here is
  // copied into each child's page tables at fork). Measured with python3.11 -I -S: pprint and
  // dataclasses pull in inspect (+1.3 MB each), statistics +0.8 MB, difflib, json, base64 and
  // textwrap +0.3-0.5 MB each, so they are left out; typing (+0.8 MB) stays because model code
  // writes `from typing import List` constantly. `ast` is loaded by the harness regardless.
  static const std::vector<std::string> mods = {
      "abc",      "array",    "bisect",  "cmath",   "collections", "copy",
      "decimal",  "enum",     "fractions", "functools", "heapq",   "itertools",
      "keyword",  "math",     "numbers", "operator", "random",    "re",
      "string",   "struct",   "types",   "typing",  "unicodedata",
      // Codecs load lazily from files, which the sandbox cannot open: pre-load the ones
      // string code uses (utf-8, ascii and latin-1 are built in).
      "encodings.utf_16", "encodings.utf_32", "encodings.cp1252", "encodings.rot_13",
      "encodings.shift_jis", "encodings.hex_codec",
  };
  return mods;
}

}  // namespace azr::sandbox
