// GGUF writer: what it writes reads back identically (every metadata value
// type, nested arrays, every tensor type byte for byte), in insertion order,
// aligned, and add_tensor_f32 stores exactly what the row codecs produce.
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_bytes.h"

namespace pagoda::gguf {
namespace {

using testing::TempFile;

GgufFile reopen(const GgufWriter& w, const TempFile& f) {
  f.write(w.serialize());
  return GgufFile::open(f.path());
}

// Structural equality: same type tags, same payloads, recursively.
void expect_same_value(const Value& want, const Value& got, const std::string& where) {
  ASSERT_EQ(want.type, got.type) << where;
  ASSERT_EQ(want.v.index(), got.v.index()) << where;
  if (const Array* wa = want.as_array()) {
    const Array* ga = got.as_array();
    ASSERT_NE(ga, nullptr) << where;
    ASSERT_EQ(wa->elem_type, ga->elem_type) << where;
    ASSERT_EQ(wa->items.size(), ga->items.size()) << where;
    for (size_t i = 0; i < wa->items.size(); ++i)
      expect_same_value(wa->items[i], ga->items[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  EXPECT_TRUE(want.v == got.v) << where << ": wrote " << want.to_display_string() << ", read "
                               << got.to_display_string();
}

std::vector<std::pair<std::string, Value>> every_value_type() {
  auto of = [](ValueType t, auto x) { return Value{t, x}; };
  std::vector<std::pair<std::string, Value>> kv = {
      {"u8", of(ValueType::UINT8, uint64_t{255})},
      {"i8", of(ValueType::INT8, int64_t{-128})},
      {"u16", of(ValueType::UINT16, uint64_t{65535})},
      {"i16", of(ValueType::INT16, int64_t{-32768})},
      {"u32", Value::u32(4000000000u)},
      {"i32", Value::i32(std::numeric_limits<int32_t>::min())},
      {"u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"i64", of(ValueType::INT64, std::numeric_limits<int64_t>::min())},
      {"f32", Value::f32(1e-5f)},
      {"f64", of(ValueType::FLOAT64, 0.1)},
      {"bool.true", Value::boolean(true)},
      {"bool.false", Value::boolean(false)},
      {"str", Value::str("héllo \n {{ bos_token }}")},
      {"str.empty", Value::str("")},
      {"arr.str", Value::str_array({"<unk>", "", "▁the"})},
      {"arr.f32", Value::f32_array({-1.5f, 0.0f, 3.25f})},
      {"arr.i32", Value::i32_array({-1, 0, 1})},
      {"arr.empty", Value::array(ValueType::UINT8, {})},
      {"arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})},
      {"arr.u64", Value::array(ValueType::UINT64, {Value::u64(1), Value::u64(~uint64_t{0})})},
      {"arr.f64", Value::array(ValueType::FLOAT64, {of(ValueType::FLOAT64, -2.5)})},
      {"arr.i8", Value::array(ValueType::INT8, {of(ValueType::INT8, int64_t{-1})})},
      {"arr.nested",
       Value::array(ValueType::ARRAY,
                    {Value::str_array({"a", "b"}), Value::str_array({}),
                     Value::array(ValueType::STRING, {Value::str("c")})})},
      {"arr.deep", Value::array(ValueType::ARRAY,
                                {Value::array(ValueType::ARRAY, {Value::i32_array({7})})})},
  };
  return kv;
}

TEST(GgufWriter, RoundTripsEveryValueTypeInInsertionOrder) {
  GgufWriter w;
  auto kv = every_value_type();
  for (const auto& [k, v] : kv) w.set(k, v);
  TempFile f;
  GgufFile g = reopen(w, f);
  EXPECT_EQ(g.version(), 3u);
  ASSERT_EQ(g.metadata().size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(g.metadata()[i].first, kv[i].first);
    expect_same_value(kv[i].second, g.metadata()[i].second, kv[i].first);
  }
}

TEST(GgufWriter, SettingAnExistingKeyReplacesItInPlace) {
  GgufWriter w;
  w.set("a", Value::u32(1));
  w.set("b", Value::u32(2));
  w.set("a", Value::str("one"));
  TempFile f;
  GgufFile g = reopen(w, f);
  ASSERT_EQ(g.metadata().size(), 2u);
  EXPECT_EQ(g.metadata()[0].first, "a");
  EXPECT_EQ(g.get_string("a"), "one");
  EXPECT_EQ(g.metadata()[1].first, "b");
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::vector<GgmlType> every_known_type() {
  std::vector<GgmlType> types;
  for (uint32_t id = 0; id < 64; ++id)
    if (auto t = type_traits(id)) types.push_back(t->type);
  return types;
}

TEST(GgufWriter, RoundTripsEveryTensorTypeByteForByte) {
  GgufWriter w;
  struct Written {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  std::vector<Written> written;
  uint32_t seed = 1;
  for (GgmlType type : every_known_type()) {
    const int64_t bs = traits(type).block_size;
    // Odd shapes, so sizes are rarely multiples of the alignment.
    std::vector<int64_t> dims = {bs * 3, 5, 1};
    size_t n = row_bytes(type, dims[0]) * 5;
    Written t{std::string("t.") + type_name(type), type, dims, random_bytes(n, seed++)};
    w.add_tensor(t.name, t.type, t.dims, t.bytes);
    written.push_back(std::move(t));
  }
  TempFile f;
  GgufFile g = reopen(w, f);
  ASSERT_EQ(g.tensors().size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    const Written& want = written[i];
    const TensorInfo& got = g.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_TRUE(got.type_known);
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ(got.type_id, static_cast<uint32_t>(want.type));
    EXPECT_EQ(got.dims, want.dims);
    EXPECT_EQ(got.offset % 32, 0u);
    ASSERT_EQ(got.n_bytes, want.bytes.size());
    EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), want.bytes.size()), 0);
  }
  EXPECT_EQ(g.file_size() % 32, 0u);  // the last tensor is padded too
}

TEST(GgufWriter, HonoursGeneralAlignment) {
  GgufWriter w;
  w.set("general.alignment", Value::u32(256));
  std::vector<float> x(10, 1.0f);
  w.add_tensor_f32("a", GgmlType::F32, {10}, x.data());
  w.add_tensor_f32("b", GgmlType::F32, {5, 2}, x.data());
  TempFile f;
  GgufFile g = reopen(w, f);
  EXPECT_EQ(g.alignment(), 256u);
  EXPECT_EQ(g.data_offset() % 256, 0u);
  EXPECT_EQ(g.find_tensor("a")->offset, 0u);
  EXPECT_EQ(g.find_tensor("b")->offset, 256u);
  EXPECT_EQ(g.file_size() % 256, 0u);
}

TEST(GgufWriter, WriteStoresExactlyWhatSerializeReturns) {
  GgufWriter w;
  for (const auto& [k, v] : every_value_type()) w.set(k, v);
  w.add_tensor("w", GgmlType::Q8_0, {64, 3}, random_bytes(34 * 2 * 3, 7));
  TempFile f;
  w.write(f.path());
  std::ifstream in(f.path(), std::ios::binary);
  std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(on_disk, w.serialize());
}

TEST(GgufWriter, WriteToUnwritablePathThrowsNamingIt) {
  GgufWriter w;
  w.set("a", Value::u32(1));
  const std::string path = "/nonexistent-dir-pagoda/x.gguf";
  try {
    w.write(path);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(GgufWriter, AddTensorF32StoresPlainTypesConverted) {
  const std::vector<float> x = {0.0f, -1.0f, 3.14159f, 65504.0f, 1e-7f, -2.5e10f};
  GgufWriter w;
  w.add_tensor_f32("f32", GgmlType::F32, {3, 2}, x.data());
  w.add_tensor_f32("f16", GgmlType::F16, {3, 2}, x.data());
  w.add_tensor_f32("bf16", GgmlType::BF16, {6}, x.data());
  TempFile f;
  GgufFile g = reopen(w, f);
  const TensorInfo* f32 = g.find_tensor("f32");
  const TensorInfo* f16 = g.find_tensor("f16");
  const TensorInfo* bf16 = g.find_tensor("bf16");
  ASSERT_TRUE(f32 && f16 && bf16);
  EXPECT_EQ(std::memcmp(f32->data, x.data(), x.size() * 4), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h, b;
    std::memcpy(&h, f16->data + 2 * i, 2);
    std::memcpy(&b, bf16->data + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16(x[i])) << i;
    EXPECT_EQ(b, f32_to_bf16(x[i])) << i;
  }
}

TEST(GgufWriter, AddTensorF32QuantizesEachRowWithQuantizeRow) {
  const int64_t n = 256, rows = 3;
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n * rows);
  for (float& v : x) v = dist(rng);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(type_name(type));
    GgufWriter w;
    w.add_tensor_f32("w", type, {n, rows}, x.data());
    TempFile f;
    GgufFile g = reopen(w, f);
    const TensorInfo* t = g.find_tensor("w");
    ASSERT_NE(t, nullptr);
    const size_t rb = row_bytes(type, n);
    ASSERT_EQ(t->n_bytes, rb * rows);
    std::vector<uint8_t> want(rb);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(type, x.data() + r * n, want.data(), n);
      EXPECT_EQ(std::memcmp(t->data + r * rb, want.data(), rb), 0) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace pagoda::gguf
