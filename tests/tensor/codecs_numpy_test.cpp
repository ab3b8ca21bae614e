// dequantize_row against an independent reference: the numpy decoders of
// tests/model/gguf_numpy.py (written from ggml's block layouts, sharing no code with
// src/tensor), run by Debian's /usr/bin/python3 through tests/tensor/dequant_numpy.py.
// For every quantized weight type, bit-identical float32 output on
// - blocks of random bytes whose f16 scale fields are random finite f16 values
//   (subnormals included), which reach every code, scale and min bit pattern,
//   including ones the quantizer never writes; MXFP4 gets every E8M0 exponent 0..255
//   (2^-128 subnormal up to 12 x 2^127 = inf);
// - the blocks quantize_row writes for N(0,1) data at several magnitudes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tensor/types.h"

namespace pagoda {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// Byte offsets of the f16 fields of one block (MXFP4's scale is a byte: none).
std::vector<size_t> f16_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::MXFP4: return {};
    default: return {0};  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS
  }
}

std::vector<GgmlType> quantized_weight_types() {
  std::vector<GgmlType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = type_traits(id);
    if (t && t->weight_supported && t->is_quantized) types.push_back(t->type);
  }
  return types;
}

struct Sample {
  GgmlType type;
  int64_t n_values;
  std::vector<uint8_t> bytes;
  std::string path;
};

Sample random_blocks(GgmlType type, std::mt19937& rng) {
  const TypeTraits& t = traits(type);
  const int64_t n_blocks = type == GgmlType::MXFP4 ? 256 : 64;
  Sample s{type, n_blocks * t.block_size, std::vector<uint8_t>(n_blocks * t.type_size), ""};
  for (uint8_t& b : s.bytes) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = s.bytes.data() + i * t.type_size;
    for (size_t off : f16_offsets(type)) {
      uint16_t h = static_cast<uint16_t>(rng());
      if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;  // inf/NaN exponent -> a finite one
      std::memcpy(blk + off, &h, 2);
    }
    if (type == GgmlType::MXFP4) blk[0] = static_cast<uint8_t>(i);  // every exponent once
  }
  return s;
}

Sample quantized_normals(GgmlType type, std::mt19937& rng) {
  const int64_t n = 8 * kQK_K;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t e = 0; e < n; ++e) x[e] = dist(rng) * std::pow(10.0f, static_cast<float>(e / kQK_K % 5) - 2);
  Sample s{type, n, std::vector<uint8_t>(row_bytes(type, n)), ""};
  quantize_row(type, x.data(), s.bytes.data(), n);
  return s;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(CodecsNumpy, DequantizeIsBitIdenticalToTheNumpyReferenceForEveryQuantizedType) {
  if (std::FILE* f = std::fopen(kPython, "r")) std::fclose(f);
  else GTEST_SKIP() << kPython << " not found";
  const std::string dir = ::testing::TempDir() + "codecs_numpy_" + std::to_string(::getpid());
  ASSERT_EQ(0, std::system(("mkdir -p '" + dir + "'").c_str()));

  std::mt19937 rng(2026);
  std::vector<Sample> samples;
  for (GgmlType type : quantized_weight_types()) {
    samples.push_back(random_blocks(type, rng));
    samples.push_back(quantized_normals(type, rng));
  }
  std::string cmd = std::string(kPython) + " '" + PAGODA_SOURCE_DIR + "/tests/tensor/dequant_numpy.py' '" + dir + "'";
  for (size_t i = 0; i < samples.size(); ++i) {
    Sample& s = samples[i];
    s.path = dir + "/" + type_name(s.type) + "_" + std::to_string(i) + ".bin";
    std::ofstream(s.path, std::ios::binary).write(reinterpret_cast<const char*>(s.bytes.data()),
                                                  static_cast<std::streamsize>(s.bytes.size()));
    cmd += " " + std::to_string(static_cast<uint32_t>(s.type)) + ":" + std::to_string(s.n_values) + ":'" + s.path + "'";
  }
  const int rc = std::system((cmd + " > '" + dir + "/log.txt' 2>&1").c_str());
  if (rc != 0) {
    const std::vector<uint8_t> log = read_file(dir + "/log.txt");
    FAIL() << "numpy reference failed:\n" << std::string(log.begin(), log.end());
  }

  for (const Sample& s : samples) {
    std::vector<float> got(s.n_values);
    dequantize_row(s.type, s.bytes.data(), got.data(), s.n_values);
    const std::vector<uint8_t> want = read_file(s.path + ".f32");
    ASSERT_EQ(want.size(), got.size() * sizeof(float)) << s.path;
    int failures = 0;
    for (int64_t e = 0; e < s.n_values && failures < 5; ++e) {
      uint32_t g, w;
      std::memcpy(&g, &got[e], 4);
      std::memcpy(&w, want.data() + 4 * e, 4);
      if (g != w) {
        float wf;
        std::memcpy(&wf, &w, 4);
        ADD_FAILURE() << type_name(s.type) << " " << s.path << " value " << e << " (block "
                      << e / traits(s.type).block_size << "): pagoda " << got[e] << " (0x" << std::hex << g
                      << ") numpy " << wf << " (0x" << w << std::dec << ")";
        ++failures;
      }
    }
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace pagoda
