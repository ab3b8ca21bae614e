// pagoda::Error — the one exception type for expected, user-facing failures.
//
// Contract: what() is a single line that names the thing at fault (file, key,
// tensor, offset, argument) and what is wrong with it. Callers at the edge
// (CLI, server) print it and exit / answer with an error; nothing below them
// catches it to carry on silently. Programming errors (misuse by a caller) use
// PAGODA_CHECK, which aborts with file:line; internal invariants use assert().
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace pagoda {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace pagoda

// Always-on check for caller misuse: prints the condition and aborts.
#define PAGODA_CHECK(cond, msg)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, \
                   #cond, std::string(msg).c_str());                             \
      std::abort();                                                               \
    }                                                                             \
  } while (0)
