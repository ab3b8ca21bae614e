// The safetensors reader accepts what the writer writes and rejects every
// malformed header with one line naming the file and the fault; a seeded fuzz
// run over mutated and truncated files never crashes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/error.h"
#include "safetensors/safetensors.h"

namespace pagoda::safetensors {
namespace {

std::vector<uint8_t> small_file() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  const float a[6] = {1, 2, 3, 4, 5, 6};
  w.add_f32("a", GgmlType::F32, {2, 3}, a);
  w.add_f32("b", GgmlType::BF16, {3}, a);
  w.add_f32("c", GgmlType::F16, {1, 2}, a);
  w.add("ids", "I64", {2}, std::vector<uint8_t>(16, 0));
  return w.serialize();
}

// A file with `header` as its JSON and `data_bytes` zero bytes of data.
std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes, uint64_t len_override = 0) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t len = len_override ? len_override : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(bytes.data(), bytes.size(), "x.safetensors");
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("x.safetensors: ", 0), 0u) << msg;
    return msg;
  }
  ADD_FAILURE() << "parse did not fail";
  return "";
}

TEST(Safetensors, RoundTripsWriterOutput) {
  const std::vector<uint8_t> bytes = small_file();
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);  // padded as the reference writer pads
  SafetensorsFile f = SafetensorsFile::parse(bytes.data(), bytes.size(), "x");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const TensorEntry* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgmlType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float v[6];
  std::memcpy(v, a->data, sizeof v);
  EXPECT_EQ(v[5], 6.0f);
  const TensorEntry* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::BF16);
  uint16_t h;
  std::memcpy(&h, b->data + 4, 2);
  EXPECT_EQ(bf16_to_f32(h), 3.0f);
  EXPECT_EQ(f.find("ids")->type, std::nullopt);
  EXPECT_EQ(f.find("ids")->dtype, "I64");
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  EXPECT_NE(parse_error({1, 2, 3}).find("too short"), std::string::npos);
  EXPECT_NE(parse_error(with_header("{}", 0, 1000)).find("beyond the end of the file"), std::string::npos);
  EXPECT_NE(parse_error(with_header("{\"a\":", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error(with_header("[1]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})", 4))
                .find("unknown dtype 'Q7'"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4))
                .find("out of range"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8))
                .find("needs 8"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12))
                .find("overlap"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8))
                .find("non-negative"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8))
                .find("end before they begin"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8))
                .find("a"), std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"__metadata__":{"k":1}})", 0)).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, EmptyTensorsMayShareOffsets) {
  auto bytes = with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  SafetensorsFile f = SafetensorsFile::parse(bytes.data(), bytes.size(), "x");
  EXPECT_EQ(f.tensors().size(), 2u);
}

// Mutates bytes (header region mostly) and truncates, 20000 times with a fixed
// seed: each parse either succeeds with every tensor inside the buffer or
// throws pagoda::Error — never crashes (run under the asan preset to check reads).
TEST(Safetensors, FuzzedHeadersErrorOrParseNeverCrash) {
  const std::vector<uint8_t> base = small_file();
  std::mt19937_64 rng(12345);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> b = base;
    const int n_mut = 1 + static_cast<int>(rng() % 8);
    for (int m = 0; m < n_mut; ++m) {
      const size_t limit = rng() % 4 == 0 ? b.size() : std::min<size_t>(b.size(), 8 + 160);
      const size_t pos = rng() % limit;
      switch (rng() % 4) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: b[pos] = "{}[]\":,0123456789-eE"[rng() % 20]; break;
        case 3: b.erase(b.begin() + static_cast<long>(pos)); break;
      }
    }
    if (rng() % 5 == 0) b.resize(rng() % (b.size() + 1));
    std::unique_ptr<uint8_t[]> exact(new uint8_t[b.size()]);  // exact size, so ASan sees overreads
    if (!b.empty()) std::memcpy(exact.get(), b.data(), b.size());
    try {
      SafetensorsFile f = SafetensorsFile::parse(exact.get(), b.size(), "fuzz");
      for (const TensorEntry& t : f.tensors()) {
        ASSERT_GE(t.data, exact.get());
        ASSERT_LE(t.data + t.n_bytes(), exact.get() + b.size());
      }
      ++ok;
    } catch (const Error&) {
      ++failed;
    }
  }
  EXPECT_GT(failed, 1000);
  EXPECT_GT(ok, 10);
}

}  // namespace
}  // namespace pagoda::safetensors
