// Shared helpers for the tokenizer tests: the real vocabularies in shared/
// (loaded once per test binary) and temp files for synthetic ones.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::testing_tok {

inline const std::string kShared = PAGODA_SHARED_DIR;

inline const Tokenizer& llama_spm() {  // llama.cpp's Llama 2 vocab (SPM, GGUF)
  static const auto tok = Tokenizer::from_gguf(
      gguf::GgufFile::open(kShared + "/models/ggml-vocab/ggml-vocab-llama-spm.gguf"));
  return *tok;
}

inline const Tokenizer& gpt2() {  // byte-level BPE from GGUF
  static const auto tok =
      Tokenizer::from_gguf(gguf::GgufFile::open(kShared + "/models/ggml-vocab/ggml-vocab-gpt-2.gguf"));
  return *tok;
}

inline const Tokenizer& llama3() {
  static const auto tok =
      Tokenizer::from_hf_json(kShared + "/models/llama3-tokenizer/tokenizer.json",
                              kShared + "/models/llama3-tokenizer/tokenizer_config.json");
  return *tok;
}

inline const Tokenizer& qwen3() {
  static const auto tok =
      Tokenizer::from_hf_json(kShared + "/models/qwen3-tokenizer/tokenizer.json",
                              kShared + "/models/qwen3-tokenizer/tokenizer_config.json");
  return *tok;
}

inline const Tokenizer& mistral() {  // SPM-style BPE with byte fallback, tokenizer.json
  static const auto tok =
      Tokenizer::from_hf_json(kShared + "/models/mistral-7b-v0.1-tokenizer/tokenizer.json",
                              kShared + "/models/mistral-7b-v0.1-tokenizer/tokenizer_config.json");
  return *tok;
}

// A path under the gtest temp dir that is private to this process: ctest runs
// test cases as parallel processes, and two of them rewriting one shared file
// while the other has it mapped ends in SIGBUS.
// Every path handed out is removed when the process exits (tests map these files, so
// not before): ~400 files were left behind per suite run otherwise.
inline std::string temp_path(const std::string& name) {
  static struct Registry {
    std::vector<std::string> paths;
    ~Registry() {
      for (const std::string& p : paths) std::remove(p.c_str());
    }
  } registry;
  std::string path = ::testing::TempDir() + "pagoda_tok_" + std::to_string(::getpid()) + "_" + name;
  registry.paths.push_back(path);
  return path;
}

// Writes `contents` to a fresh file under the gtest temp dir; returns its path.
inline std::string write_temp(const std::string& name, const std::string& contents) {
  const std::string path = temp_path(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << contents;
  return path;
}

inline std::string write_temp_gguf(const std::string& name, const gguf::GgufWriter& w) {
  const std::string path = temp_path(name);
  w.write(path);
  return path;
}

}  // namespace pagoda::testing_tok
