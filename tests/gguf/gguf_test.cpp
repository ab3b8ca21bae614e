// GGUF reader: every class of malformed file is rejected with a one-line
// pagoda::Error naming the file and the offending item; valid hand-built and
// real files parse to the expected directory. Malformed files are spelled out
// byte by byte (gguf_bytes.h) so each test says exactly what is wrong.
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_bytes.h"

namespace pagoda::gguf {
namespace {

using testing::Bytes;
using testing::TempFile;

// ValueType / GgmlType ids as written in files.
constexpr uint32_t kU8 = 0, kU32 = 4, kI32 = 5, kF32v = 6, kBool = 7, kStr = 8, kArr = 9,
                   kU64 = 10;
constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8, kIQ3_S = 21;
constexpr uint64_t kHuge = uint64_t{1} << 62;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

// Opens `b` as a file and returns the error message, checking it is one line
// naming the file. Fails the test if open() accepts the file.
std::string open_error(const Bytes& b) {
  TempFile f(b.bytes());
  try {
    GgufFile::open(f.path());
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_CONTAINS(msg, f.path());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "open() accepted the file";
  return "";
}

// Header, one string key, two tensors (f32 [8] at 0, q8_0 [32, 2] at 32); the
// last tensor ends exactly at the end of the file, so every proper prefix is
// invalid.
Bytes small_valid_file(uint32_t version = 3) {
  Bytes b;
  b.header(version, 2, 3)
      .kv_str("general.architecture", "llama")
      .kv_u32("general.alignment", 32)
      .key("list", kArr).u32(kU32).u64(2).u32(7).u32(9)
      .tensor("a", {8}, kF32, 0)
      .tensor("b", {32, 2}, kQ8_0, 32)
      .pad_to(32)
      .fill(32, 0xAA)   // a: 8 x f32
      .fill(68, 0xBB);  // b: 2 blocks x 34 bytes
  return b;
}

TEST(GgufReader, OpensSmallValidFile) {
  TempFile f(small_valid_file().bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  ASSERT_EQ(g.metadata().size(), 3u);
  EXPECT_EQ(g.metadata()[0].first, "general.architecture");
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  const Array* list = g.get_array("list");
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->elem_type, ValueType::UINT32);
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[1].as_uint(), 9u);

  ASSERT_EQ(g.tensors().size(), 2u);
  const TensorInfo* a = g.find_tensor("a");
  const TensorInfo* b = g.find_tensor("b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(a->type, GgmlType::F32);
  EXPECT_EQ(a->n_bytes, 32u);
  EXPECT_EQ(a->data[0], 0xAA);
  EXPECT_EQ(b->type, GgmlType::Q8_0);
  EXPECT_EQ(b->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(b->n_elements(), 64);
  EXPECT_EQ(b->n_rows(), 2);
  EXPECT_EQ(b->shape_string(), "[32, 2]");
  EXPECT_EQ(b->n_bytes, 68u);
  EXPECT_EQ(b->data - a->data, 32);
  EXPECT_EQ(b->data[67], 0xBB);
  EXPECT_EQ(g.data_offset() + 32 + 68, g.file_size());
  EXPECT_EQ(g.find_tensor("c"), nullptr);
}

TEST(GgufReader, OpensHandBuiltVersion2File) {
  TempFile f(small_valid_file(2).bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_EQ(g.version(), 2u);
  EXPECT_EQ(g.tensors().size(), 2u);
  EXPECT_EQ(g.find_tensor("b")->data[0], 0xBB);
}

TEST(GgufReader, EveryTruncatedPrefixThrows) {
  const std::vector<uint8_t> full = small_valid_file().bytes();
  TempFile f;
  for (size_t n = 0; n < full.size(); ++n) {
    f.write(full.data(), n);
    try {
      GgufFile::open(f.path());
      ADD_FAILURE() << "prefix of " << n << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_CONTAINS(e.what(), f.path());
    }
  }
}

// Overwrites each byte of a valid file with a few values: open() may accept
// or reject the result, but only ever by returning or throwing pagoda::Error
// (run under ASan/UBSan to catch out-of-bounds reads).
TEST(GgufReader, CorruptedBytesNeverCrash) {
  const std::vector<uint8_t> full = small_valid_file().bytes();
  TempFile f;
  size_t rejected = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t value : {0x00, 0x80, 0xff}) {
      std::vector<uint8_t> bytes = full;
      bytes[i] = value;
      f.write(bytes);
      try {
        GgufFile::open(f.path());
      } catch (const Error& e) {
        ++rejected;
        EXPECT_CONTAINS(e.what(), f.path());
      }
    }
  }
  EXPECT_GT(rejected, 0u);
}

TEST(GgufReader, RejectsBadMagic) {
  Bytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "not a GGUF file");
  EXPECT_CONTAINS(msg, "47 47 4d 4c");
}

TEST(GgufReader, RejectsVersion1WithClearMessage) {
  Bytes b;
  b.raw("GGUF").u32(1).u32(0).u32(0);
  EXPECT_CONTAINS(open_error(b), "GGUF version 1 (32-bit counts) is not supported");
}

TEST(GgufReader, RejectsVersion4) {
  Bytes b;
  b.header(4, 0, 0);
  EXPECT_CONTAINS(open_error(b), "unsupported GGUF version 4");
}

TEST(GgufReader, RejectsBigEndianFile) {
  Bytes b;
  b.raw("GGUF").raw(std::string("\0\0\0\3", 4)).u64(0).u64(0);
  EXPECT_CONTAINS(open_error(b), "big-endian");
}

// Each absurd count/length must fail at once: no reserve() of 2^62 items, no
// loop over them.
TEST(GgufReader, RejectsAbsurdCountsAndLengthsQuickly) {
  auto start = std::chrono::steady_clock::now();
  {
    Bytes b;
    b.header(3, kHuge, 0).fill(64, 0);
    EXPECT_CONTAINS(open_error(b), "tensor count 4611686018427387904 cannot fit");
  }
  {
    Bytes b;
    b.header(3, 0, kHuge).fill(64, 0);
    EXPECT_CONTAINS(open_error(b), "metadata count 4611686018427387904 cannot fit");
  }
  {
    Bytes b;
    b.header(3, 0, 1).u64(kHuge).raw("key").fill(64, 0);
    std::string msg = open_error(b);
    EXPECT_CONTAINS(msg, "key length 4611686018427387904 exceeds");
    EXPECT_CONTAINS(msg, "byte offset 24");
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("general.name", kStr).u64(kHuge).fill(64, 0);
    std::string msg = open_error(b);
    EXPECT_CONTAINS(msg, "'general.name'");
    EXPECT_CONTAINS(msg, "string value length 4611686018427387904");
  }
  {
    Bytes b;
    b.header(3, 0, 1).key("tokenizer.ggml.scores", kArr).u32(kF32v).u64(kHuge).fill(64, 0);
    std::string msg = open_error(b);
    EXPECT_CONTAINS(msg, "'tokenizer.ggml.scores'");
    EXPECT_CONTAINS(msg, "array length 4611686018427387904");
  }
  {
    Bytes b;
    b.header(3, 1, 0).u64(kHuge).raw("t").fill(64, 0);
    EXPECT_CONTAINS(open_error(b), "tensor name length 4611686018427387904");
  }
  // Bigger than the file but small enough to reserve: still rejected up front.
  {
    Bytes b;
    b.header(3, 0, 1).key("arr", kArr).u32(kU32).u64(1000).fill(400, 0);
    EXPECT_CONTAINS(open_error(b), "array length 1000 of uint32 cannot fit in the 400 bytes");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(GgufReader, RejectsInvalidValueType) {
  Bytes b;
  b.header(3, 0, 1).key("general.name", 13).u32(0);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "'general.name'");
  EXPECT_CONTAINS(msg, "invalid value type 13");
  EXPECT_CONTAINS(msg, "byte offset 44");  // 24 header + 8 + 12 key
}

TEST(GgufReader, RejectsInvalidArrayElementType) {
  Bytes b;
  b.header(3, 0, 1).key("arr", kArr).u32(99).u64(1).u32(0);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "'arr'");
  EXPECT_CONTAINS(msg, "invalid array element type 99");
}

TEST(GgufReader, RejectsBoolOtherThanZeroOrOne) {
  Bytes b;
  b.header(3, 0, 1).key("flag", kBool).u8(2);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "'flag'");
  EXPECT_CONTAINS(msg, "bool value 2 is not 0 or 1");
}

// `levels` arrays, each holding one array, the innermost empty.
Bytes nested_arrays(int levels) {
  Bytes b;
  b.header(3, 0, 1).key("nest", kArr);
  for (int i = 1; i < levels; ++i) b.u32(kArr).u64(1);
  b.u32(kU8).u64(0);
  return b;
}

TEST(GgufReader, AcceptsArraysNestedEightDeep) {
  TempFile f(nested_arrays(8).bytes());
  GgufFile g = GgufFile::open(f.path());
  const Array* a = g.get_array("nest");
  int depth = 1;
  while (a->elem_type == ValueType::ARRAY) {
    a = a->items.at(0).as_array();
    ++depth;
  }
  EXPECT_EQ(depth, 8);
}

TEST(GgufReader, RejectsArrayNestingBomb) {
  EXPECT_CONTAINS(open_error(nested_arrays(9)), "arrays nested more than 8 deep");
  std::string msg = open_error(nested_arrays(100000));
  EXPECT_CONTAINS(msg, "'nest'");
  EXPECT_CONTAINS(msg, "arrays nested more than 8 deep");
}

TEST(GgufReader, RejectsDuplicateKey) {
  Bytes b;
  b.header(3, 0, 2).kv_u32("llama.block_count", 1).kv_u32("llama.block_count", 2);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "'llama.block_count'");
  EXPECT_CONTAINS(msg, "duplicate key");
}

TEST(GgufReader, RejectsEmptyKey) {
  Bytes b;
  b.header(3, 0, 1).kv_u32("", 1);
  EXPECT_CONTAINS(open_error(b), "empty key");
}

TEST(GgufReader, EscapesControlBytesInNamesSoTheMessageStaysOneLine) {
  Bytes b;
  b.header(3, 0, 2).kv_u32("a\nb", 1).kv_u32("a\nb", 1);
  EXPECT_CONTAINS(open_error(b), "'a\\x0ab'");  // open_error checks for no '\n'
}

// A file with no metadata and the given tensor infos, padded, then `data_bytes`.
Bytes tensors_file(const std::vector<std::pair<std::string, std::vector<uint64_t>>>& shapes,
                   uint32_t type, const std::vector<uint64_t>& offsets, size_t data_bytes) {
  Bytes b;
  b.header(3, shapes.size(), 0);
  for (size_t i = 0; i < shapes.size(); ++i)
    b.tensor(shapes[i].first, shapes[i].second, type, offsets[i]);
  b.pad_to(32).fill(data_bytes, 0);
  return b;
}

TEST(GgufReader, RejectsDuplicateTensorName) {
  std::string msg = open_error(tensors_file({{"w", {8}}, {"w", {8}}}, kF32, {0, 32}, 64));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "duplicate tensor name");
}

TEST(GgufReader, RejectsZeroAndFiveDims) {
  std::string msg = open_error(tensors_file({{"scalar", {}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "tensor 'scalar'");
  EXPECT_CONTAINS(msg, "n_dims 0 is outside 1..4");
  msg = open_error(tensors_file({{"t5", {1, 1, 1, 1, 1}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "tensor 't5'");
  EXPECT_CONTAINS(msg, "n_dims 5 is outside 1..4");
}

TEST(GgufReader, RejectsZeroDimension) {
  std::string msg = open_error(tensors_file({{"w", {4, 0}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "dimension 1 is 0");
}

TEST(GgufReader, RejectsElementCountOverflow) {
  uint64_t big = uint64_t{1} << 32;
  std::string msg = open_error(tensors_file({{"w", {big, big}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "element count overflows int64 at dimension 1");
  // A single dimension that does not fit int64 at all.
  msg = open_error(tensors_file({{"w", {uint64_t{1} << 63}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "element count overflows int64 at dimension 0");
}

TEST(GgufReader, RejectsRowNotAMultipleOfTheBlockSize) {
  std::string msg = open_error(tensors_file({{"w", {33, 2}}}, kQ4_0, {0}, 64));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "first dimension 33 is not a multiple of the q4_0 block size 32");
}

TEST(GgufReader, RejectsMisalignedTensorOffset) {
  std::string msg = open_error(tensors_file({{"w", {8}}}, kF32, {4}, 64));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "data offset 4 is not a multiple of the alignment 32");
}

TEST(GgufReader, RejectsTensorRangePastEndOfFile) {
  // 16 f32 = 64 bytes, but the data section holds 32.
  std::string msg = open_error(tensors_file({{"w", {16}}}, kF32, {0}, 32));
  EXPECT_CONTAINS(msg, "tensor 'w'");
  EXPECT_CONTAINS(msg, "64 bytes at data offset 0 run past the end of the file");
  // An offset far beyond the file must not wrap around.
  msg = open_error(tensors_file({{"w", {8}}}, kF32, {~uint64_t{31}}, 32));
  EXPECT_CONTAINS(msg, "run past the end of the file");
}

TEST(GgufReader, RejectsOverlappingTensors) {
  // a: 16 f32 at [0, 64); b: 8 f32 at [32, 64). Listed out of offset order.
  std::string msg =
      open_error(tensors_file({{"b", {8}}, {"a", {16}}}, kF32, {32, 0}, 96));
  EXPECT_CONTAINS(msg, "tensor 'b': data [32, 64) overlaps tensor 'a' data [0, 64)");
}

TEST(GgufReader, AcceptsTensorsStoredOutOfOffsetOrder) {
  TempFile f(tensors_file({{"second", {8}}, {"first", {8}}}, kF32, {32, 0}, 64).bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_EQ(g.find_tensor("second")->data - g.find_tensor("first")->data, 32);
}

TEST(GgufReader, RejectsBadAlignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    Bytes b;
    b.header(3, 0, 1).kv_u32("general.alignment", bad);
    std::string msg = open_error(b);
    EXPECT_CONTAINS(msg, "'general.alignment'");
    EXPECT_CONTAINS(msg, "alignment " + std::to_string(bad) + " is not a power of two");
  }
  Bytes b;
  b.header(3, 0, 1).key("general.alignment", kU64).u64(32);
  std::string msg = open_error(b);
  EXPECT_CONTAINS(msg, "'general.alignment'");
  EXPECT_CONTAINS(msg, "has type uint64, expected uint32");
}

TEST(GgufReader, HonoursCustomAlignment) {
  Bytes b;
  b.header(3, 2, 1).kv_u32("general.alignment", 64);
  b.tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 64).pad_to(64).fill(96, 1);
  TempFile f(b.bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  EXPECT_EQ(g.find_tensor("b")->offset, 64u);
  EXPECT_EQ(g.find_tensor("b")->data - g.find_tensor("a")->data, 64);
  // The mapping is page-aligned, so file alignment is address alignment.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.find_tensor("b")->data) % 64, 0u);
  // 32 would be aligned by default but not under alignment 64.
  Bytes bad;
  bad.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("a", {8}, kF32, 32).pad_to(64);
  bad.fill(96, 0);
  EXPECT_CONTAINS(open_error(bad), "data offset 32 is not a multiple of the alignment 64");
}

TEST(GgufReader, AcceptsUnknownTensorTypeWithoutData) {
  // An IQ3_S tensor (type 21, unknown to pagoda) next to a known one; its
  // size is unknown, so range and overlap checks skip it.
  Bytes b;
  b.header(3, 2, 0).tensor("iq", {256, 4}, kIQ3_S, 0).tensor("w", {8}, kF32, 0);
  b.pad_to(32).fill(32, 0);
  TempFile f(b.bytes());
  GgufFile g = GgufFile::open(f.path());
  const TensorInfo* iq = g.find_tensor("iq");
  ASSERT_NE(iq, nullptr);
  EXPECT_FALSE(iq->type_known);
  EXPECT_EQ(iq->type_id, kIQ3_S);
  EXPECT_EQ(iq->data, nullptr);
  EXPECT_EQ(iq->n_bytes, 0u);
  EXPECT_EQ(iq->n_elements(), 1024);
  EXPECT_TRUE(g.find_tensor("w")->type_known);
}

TEST(GgufReader, AcceptsMetadataOnlyFileWithoutTrailingPadding) {
  Bytes b;
  b.header(3, 0, 1).kv_str("general.architecture", "llama");
  ASSERT_NE(b.size() % 32, 0u);
  TempFile f(b.bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_TRUE(g.tensors().empty());
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
}

TEST(GgufReader, TypedGettersConvertCompatibleValues) {
  Bytes b;
  b.header(3, 0, 5)
      .kv_u32("u", 7)
      .key("neg", kI32).i32(-3)
      .key("f", kF32v).f32(0.5f)
      .key("yes", kBool).u8(1)
      .key("big", kU64).u64(~uint64_t{0});
  TempFile f(b.bytes());
  GgufFile g = GgufFile::open(f.path());
  EXPECT_EQ(g.get_int("u"), 7);
  EXPECT_EQ(g.get_uint("u"), 7u);
  EXPECT_EQ(g.get_float("u"), 7.0);  // integers widen to double
  EXPECT_EQ(g.get_int("neg"), -3);
  EXPECT_EQ(g.get_float("f"), 0.5);
  EXPECT_EQ(g.get_bool("yes"), true);
  EXPECT_EQ(g.get_uint("big"), ~uint64_t{0});
  EXPECT_EQ(g.get_string("absent"), std::nullopt);
  EXPECT_EQ(g.get_int("absent"), std::nullopt);
  EXPECT_EQ(g.get_array("absent"), nullptr);
  EXPECT_TRUE(g.has("u"));
  EXPECT_FALSE(g.has("absent"));
}

TEST(GgufReader, TypedGettersThrowOnTypeMismatchNamingFileAndKey) {
  Bytes b;
  b.header(3, 0, 4)
      .kv_str("general.name", "tiny")
      .kv_u32("llama.block_count", 5)
      .key("neg", kI32).i32(-3)
      .key("big", kU64).u64(~uint64_t{0});
  TempFile f(b.bytes());
  GgufFile g = GgufFile::open(f.path());
  auto expect_mismatch = [&](auto getter, const std::string& key, const std::string& want) {
    try {
      getter();
      ADD_FAILURE() << "no throw for " << key;
    } catch (const Error& e) {
      EXPECT_CONTAINS(e.what(), f.path());
      EXPECT_CONTAINS(e.what(), "'" + key + "'");
      EXPECT_CONTAINS(e.what(), want);
    }
  };
  expect_mismatch([&] { g.get_int("general.name"); }, "general.name",
                  "has type string (\"tiny\"), expected an integer");
  expect_mismatch([&] { g.get_float("general.name"); }, "general.name", "expected a number");
  expect_mismatch([&] { g.get_string("llama.block_count"); }, "llama.block_count",
                  "has type uint32 (5), expected string");
  expect_mismatch([&] { g.get_bool("llama.block_count"); }, "llama.block_count", "expected bool");
  expect_mismatch([&] { g.get_array("llama.block_count"); }, "llama.block_count",
                  "expected array");
  expect_mismatch([&] { g.get_uint("neg"); }, "neg", "expected a non-negative integer");
  expect_mismatch([&] { g.get_int("big"); }, "big", "expected an integer that fits int64");
}

TEST(GgufValue, ConvertsOnlyWithinRange) {
  EXPECT_EQ(Value::u64(~uint64_t{0}).as_int(), std::nullopt);
  EXPECT_EQ(Value::i32(-1).as_uint(), std::nullopt);
  EXPECT_EQ(Value::i32(-1).as_int(), -1);
  EXPECT_EQ(Value::u32(3).as_double(), 3.0);
  EXPECT_EQ(Value::f32(1.5f).as_int(), std::nullopt);
  EXPECT_EQ(Value::u32(1).as_bool(), std::nullopt);
  EXPECT_EQ(Value::boolean(true).as_int(), std::nullopt);
  EXPECT_EQ(Value::str("x").as_array(), nullptr);
  EXPECT_TRUE(Value::u32(1).is_integer());
  EXPECT_FALSE(Value::boolean(true).is_integer());
}

TEST(GgufValue, DisplayStringIsOneTruncatedLine) {
  EXPECT_EQ(Value::f32(1e-5f).to_display_string(), "1e-05");
  EXPECT_EQ(Value::boolean(false).to_display_string(), "false");
  EXPECT_EQ(Value::i32(-7).to_display_string(), "-7");
  EXPECT_EQ(Value::str("a\"b\n").to_display_string(), "\"a\\\"b\\n\"");
  EXPECT_EQ(Value::i32_array({1, 2, 3, 4}).to_display_string(2), "array<int32>[4] [1, 2, ...]");
  EXPECT_EQ(Value::str_array({}).to_display_string(), "array<string>[0] []");
  std::string long_str = Value::str(std::string(1000, 'x')).to_display_string();
  EXPECT_LT(long_str.size(), 100u);
  EXPECT_CONTAINS(long_str, "(1000 bytes)");
  Value nested = Value::array(ValueType::ARRAY, {Value::i32_array({1}), Value::i32_array({})});
  EXPECT_EQ(nested.to_display_string(), "array<array>[2] [array<int32>[1] [1], array<int32>[0] []]");
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufRealFiles, ReadsStories260K) {
  const std::string path = PAGODA_SHARED_DIR "/models/stories260K/stories260K.gguf";
  GgufFile g = GgufFile::open(path);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_uint("llama.block_count"), 5u);
  EXPECT_EQ(g.get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
  const Array* tokens = g.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->elem_type, ValueType::STRING);
  EXPECT_EQ(tokens->items.size(), 512u);
  EXPECT_EQ(g.get_array("tokenizer.ggml.scores")->items.size(), 512u);

  EXPECT_EQ(g.tensors().size(), 48u);  // 5 layers x 9 + embeddings, final norm, output
  const TensorInfo* emb = g.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::F32);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  const TensorInfo* q = g.find_tensor("blk.4.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<int64_t>{64, 64}));
  const TensorInfo* k = g.find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dims, (std::vector<int64_t>{64, 32}));  // 4 kv heads x head_dim 8

  // The llama2.c export of the same model starts (after its 7 x int32 header)
  // with the same embedding matrix, byte for byte; output.weight is a copy.
  std::vector<uint8_t> bin =
      read_file_bytes(PAGODA_SHARED_DIR "/models/stories260K/stories260K.bin");
  ASSERT_GE(bin.size(), 28 + emb->n_bytes);
  EXPECT_EQ(std::memcmp(emb->data, bin.data() + 28, emb->n_bytes), 0);
  const TensorInfo* out = g.find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(out->n_bytes, emb->n_bytes);
  EXPECT_EQ(std::memcmp(out->data, emb->data, emb->n_bytes), 0);
  for (const TensorInfo& t : g.tensors())
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % g.alignment(), 0u) << t.name;
}

TEST(GgufRealFiles, ReadsLlamaSpmVocabWithoutTensors) {
  GgufFile g =
      GgufFile::open(PAGODA_SHARED_DIR "/models/ggml-vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(g.version(), 3u);
  EXPECT_TRUE(g.tensors().empty());
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
  const Array* tokens = g.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->items.size(), 32000u);
  EXPECT_EQ(*tokens->items[0].as_string(), "<unk>");
  EXPECT_EQ(*tokens->items[1].as_string(), "<s>");
  EXPECT_EQ(g.get_array("tokenizer.ggml.scores")->items.size(), 32000u);
  EXPECT_EQ(g.get_array("tokenizer.ggml.token_type")->items.size(), 32000u);
}

TEST(GgufReader, MovedFileKeepsTensorDataValid) {
  TempFile f(small_valid_file().bytes());
  GgufFile g = GgufFile::open(f.path());
  const uint8_t* data = g.find_tensor("a")->data;
  GgufFile moved = std::move(g);
  EXPECT_EQ(moved.find_tensor("a")->data, data);
  EXPECT_EQ(moved.find_tensor("a")->data[0], 0xAA);
  EXPECT_EQ(moved.get_string("general.architecture"), "llama");
}

}  // namespace
}  // namespace pagoda::gguf
