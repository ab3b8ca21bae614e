// The hub tests' way to look at an error: the message fn throws, or "(no error)".
#pragma once

#include <functional>
#include <string>

#include "common/error.h"

namespace pagoda::hub::testing {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace pagoda::hub::testing
