// Shared by the tests that run real and synthetic models (tests/model, tests/engine):
// where stories260K lives, loading a GGUF model, greedy argmax.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"

namespace pagoda::test {

inline const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

// Greedy pick: the lowest id among equal maxima.
inline int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// A model with the mapping it views (the file must outlive the model).
struct Loaded {
  std::shared_ptr<const gguf::GgufFile> file;
  std::unique_ptr<Model> model;
};

inline Loaded load(const std::string& path) {
  Loaded l;
  l.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  l.model = Model::load(l.file);
  return l;
}

}  // namespace pagoda::test
