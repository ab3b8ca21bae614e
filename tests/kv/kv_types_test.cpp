// KV element types: names, byte sizes, round-trip error bounds, edge values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/system_memory.h"
#include "kv/kv_config.h"
#include "tensor/kv_types.h"

namespace pagoda {
namespace {

TEST(KvTypes, NamesRoundTripAndUnknownNamesAreRejected) {
  for (int i = 0; i < kNumKvTypes; ++i) {
    const KvType t = static_cast<KvType>(i);
    EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  }
  EXPECT_EQ(parse_kv_type("Q8"), KvType::Q8);
  EXPECT_FALSE(parse_kv_type("q8_0").has_value());
  EXPECT_FALSE(parse_kv_type("").has_value());
  EXPECT_THROW(parse_kv_type_flag("int8", "--kv-type-k"), Error);
  try {
    parse_kv_type_flag("int8", "--kv-type-k");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--kv-type-k: unknown KV type 'int8' (expected one of f32, f16, bf16, q8, q4)");
  }
}

TEST(KvTypes, RowAndSidecarBytes) {
  EXPECT_EQ(kv_row_bytes(KvType::F32, 128), 512u);
  EXPECT_EQ(kv_row_bytes(KvType::F16, 128), 256u);
  EXPECT_EQ(kv_row_bytes(KvType::BF16, 128), 256u);
  EXPECT_EQ(kv_row_bytes(KvType::Q8, 128), 128u);
  EXPECT_EQ(kv_row_sidecar_bytes(KvType::Q8, 128), 4u);
  EXPECT_EQ(kv_row_bytes(KvType::Q4, 128), 64u);
  EXPECT_EQ(kv_row_sidecar_bytes(KvType::Q4, 128), 28u);  // 4 groups × (d, m, outlier f16 + index u8)
  EXPECT_EQ(kv_row_sidecar_bytes(KvType::Q4, 80), 35u);   // 5 groups of 16
  EXPECT_EQ(kv_row_sidecar_bytes(KvType::Q4, 8), 7u);     // 1 group of 8
  EXPECT_EQ(q4_group_size(80), 16);
  EXPECT_EQ(q4_group_size(12), 0);
  EXPECT_FALSE(kv_type_supports(KvType::Q4, 12));
  EXPECT_TRUE(kv_type_supports(KvType::Q8, 12));
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16}) EXPECT_EQ(kv_row_sidecar_bytes(t, 64), 0u);
}

// Relative RMS error of a round trip, and the max error bound each format promises.
TEST(KvTypes, RoundTripErrorIsWithinTheFormatsBound) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t d : {8, 16, 24, 64, 80, 128, 256}) {
    std::vector<float> x(static_cast<size_t>(d)), y(x.size());
    for (int rep = 0; rep < 50; ++rep) {
      for (float& v : x) v = nd(rng) * 3.0f + (rep % 3 == 0 ? 2.0f : 0.0f);
      for (int i = 0; i < kNumKvTypes; ++i) {
        const KvType t = static_cast<KvType>(i);
        if (!kv_type_supports(t, d)) continue;
        std::vector<uint8_t> data(kv_row_bytes(t, d)), side(kv_row_sidecar_bytes(t, d) + 1);
        kv_quantize_row(t, x.data(), d, data.data(), side.data());
        kv_dequantize_row_ref(t, data.data(), side.data(), d, y.data());
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        for (int64_t j = 0; j < d; ++j) {
          float bound = 0;
          switch (t) {
            case KvType::F32: bound = 0; break;
            case KvType::F16: bound = std::fabs(x[j]) * 4.9e-4f + 6e-8f; break;
            case KvType::BF16: bound = std::fabs(x[j]) * 3.91e-3f; break;
            case KvType::Q8: bound = amax / 127.0f * 0.5f * 1.001f; break;
            case KvType::Q4: {
              const int64_t g = q4_group_size(d), g0 = j / g * g;
              float lo = x[g0], hi = x[g0];
              for (int64_t k = g0; k < g0 + g; ++k) lo = std::min(lo, x[k]), hi = std::max(hi, x[k]);
              // half a step, plus what rounding d and m to f16 can shift.
              bound = (hi - lo) / 15.0f * 0.5f + (std::fabs(lo) + (hi - lo)) * 1e-3f;
              break;
            }
          }
          ASSERT_LE(std::fabs(y[j] - x[j]), bound)
              << kv_type_name(t) << " d=" << d << " j=" << j << " x=" << x[j] << " y=" << y[j];
        }
      }
    }
  }
}

// One channel far from the rest (stories260K's K: mean -18.9 next to channels of std
// ~1.5) is stored in f16, so the other values keep a step of their own range / 15.
TEST(KvTypes, Q4KeepsOneOutlierPerGroupAndQuantizesTheRestOnTheirOwnRange) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (int64_t d : {8, 64, 80}) {
    const int64_t g = q4_group_size(d);
    std::vector<float> x(static_cast<size_t>(d)), y(x.size());
    std::vector<uint8_t> data(kv_row_bytes(KvType::Q4, d)), side(kv_row_sidecar_bytes(KvType::Q4, d));
    for (int rep = 0; rep < 20; ++rep) {
      for (float& v : x) v = nd(rng);
      const int64_t out_idx = rep % g;
      for (int64_t g0 = 0; g0 < d; g0 += g) x[g0 + out_idx] = (rep % 2 ? -18.9f : 25.0f) + nd(rng);
      kv_quantize_row(KvType::Q4, x.data(), d, data.data(), side.data());
      kv_dequantize_row_ref(KvType::Q4, data.data(), side.data(), d, y.data());
      for (int64_t g0 = 0; g0 < d; g0 += g) {
        float lo = 1e9f, hi = -1e9f;
        for (int64_t i = g0; i < g0 + g; ++i)
          if (i != g0 + out_idx) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
        for (int64_t i = g0; i < g0 + g; ++i) {
          const float bound = i == g0 + out_idx ? std::fabs(x[i]) * 4.9e-4f
                                                 : (hi - lo) / 15.0f * 0.5f + (std::fabs(lo) + (hi - lo)) * 1e-3f;
          ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "d=" << d << " i=" << i << " x=" << x[i] << " y=" << y[i];
        }
      }
    }
  }
}

TEST(KvTypes, EdgeValues) {
  // All zeros: a zero scale, exact zeros back.
  std::vector<float> z(64, 0.0f), y(64, 1.0f);
  for (KvType t : {KvType::Q8, KvType::Q4}) {
    std::vector<uint8_t> data(64), side(64);
    kv_quantize_row(t, z.data(), 64, data.data(), side.data());
    kv_dequantize_row_ref(t, data.data(), side.data(), 64, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f) << kv_type_name(t);
  }
  // f16 saturates instead of turning into inf.
  std::vector<float> big(8, 1e6f), out(8);
  big[1] = -1e6f;
  std::vector<uint8_t> data(16);
  kv_quantize_row(KvType::F16, big.data(), 8, data.data(), nullptr);
  kv_dequantize_row_ref(KvType::F16, data.data(), nullptr, 8, out.data());
  EXPECT_EQ(out[0], 65504.0f);
  EXPECT_EQ(out[1], -65504.0f);
  // q8 keeps the largest magnitude exactly (±127 · s).
  std::vector<float> x = {0.5f, -2.0f, 1.0f, 0.25f, 0.0f, 1.5f, -1.0f, 2.0f};
  std::vector<uint8_t> q(8), s(4);
  kv_quantize_row(KvType::Q8, x.data(), 8, q.data(), s.data());
  kv_dequantize_row_ref(KvType::Q8, q.data(), s.data(), 8, out.data());
  EXPECT_FLOAT_EQ(out[1], -2.0f);
  EXPECT_FLOAT_EQ(out[7], 2.0f);
}

TEST(KvConfig, ParsesByteSizesWithSuffixes) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("4GiB"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4gib"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4G"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4g"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("300MB"), 300000000u);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("2KiB"), 2048u);
  EXPECT_EQ(parse_byte_size("2kb"), 2000u);
  EXPECT_EQ(parse_byte_size("1TiB"), 1ull << 40);
  EXPECT_EQ(parse_byte_size("10B"), 10u);
  EXPECT_EQ(parse_byte_size("0.5K"), 512u);
  for (const char* bad : {"", "GiB", "-1", "4 GiB", "4XB", "1..5G", "4GiBs", "0x10"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
  EXPECT_THROW(parse_byte_size("99999999TiB"), Error);
  try {
    parse_byte_size("4XB");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-bytes: '4XB' is not a byte size"), std::string::npos);
  }
}

TEST(KvConfig, BlockSizeMustBeAPowerOfTwoFrom8To256) {
  for (int ok : {8, 16, 32, 64, 128, 256}) EXPECT_NO_THROW(validate_kv_block_size(ok));
  for (int bad : {0, 4, 12, 24, 512, -16}) EXPECT_THROW(validate_kv_block_size(bad), Error) << bad;
}

// A fake /proc and cgroup file system under a temporary directory.
struct FakeSystem {
  std::string dir = "/tmp/pagoda_fake_sys_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++);
  FakeSystem() { std::filesystem::create_directories(dir); }
  ~FakeSystem() { std::filesystem::remove_all(dir); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string& rel, const std::string& text) {
    const std::string path = dir + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  SystemMemory read() { return read_system_memory(dir + "/meminfo", dir + "/self_cgroup", dir + "/cg"); }
};

constexpr uint64_t GiB = 1ull << 30;

TEST(SystemMemory, MemAvailableAloneWithoutACgroupLimit) {
  FakeSystem f;
  f.write("meminfo", "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n");
  f.write("self_cgroup", "0::/\n");
  f.write("cg/memory.max", "max\n");
  const SystemMemory m = f.read();
  EXPECT_EQ(m.mem_total, 24000000ull * 1024);
  EXPECT_EQ(m.available(), 20000000ull * 1024);
  EXPECT_FALSE(m.cgroup_limited);
  EXPECT_EQ(m.limit(), m.mem_total);
}

TEST(SystemMemory, CgroupV2LimitAndAParentsTighterOne) {
  FakeSystem f;
  f.write("meminfo", "MemTotal: 64000000 kB\nMemAvailable: 60000000 kB\n");
  f.write("self_cgroup", "0::/kubepods/pod1/c1\n");
  f.write("cg/kubepods/pod1/c1/memory.max", "max\n");
  f.write("cg/kubepods/pod1/memory.max", std::to_string(8 * GiB) + "\n");
  f.write("cg/kubepods/pod1/memory.current", std::to_string(3 * GiB) + "\n");
  f.write("cg/kubepods/memory.max", std::to_string(32 * GiB) + "\n");
  f.write("cg/kubepods/memory.current", std::to_string(4 * GiB) + "\n");
  const SystemMemory m = f.read();
  ASSERT_TRUE(m.cgroup_limited);
  EXPECT_EQ(m.cgroup_limit, 8 * GiB);
  EXPECT_EQ(m.available(), 5 * GiB);  // the pod's room, not the host's 57 GiB
  EXPECT_EQ(m.limit(), 8 * GiB);
  EXPECT_NE(m.describe().find("kubepods/pod1"), std::string::npos) << m.describe();
}

TEST(SystemMemory, CgroupV1LimitAndItsUnlimitedValue) {
  FakeSystem f;
  f.write("meminfo", "MemTotal: 64000000 kB\nMemAvailable: 60000000 kB\n");
  f.write("self_cgroup", "9:pids:/x\n4:cpu,memory:/docker/abc\n0::/\n");
  f.write("cg/memory/docker/abc/memory.limit_in_bytes", std::to_string(2 * GiB) + "\n");
  f.write("cg/memory/docker/abc/memory.usage_in_bytes", std::to_string(GiB / 2) + "\n");
  f.write("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1 "unlimited"
  SystemMemory m = f.read();
  ASSERT_TRUE(m.cgroup_limited);
  EXPECT_EQ(m.available(), GiB + GiB / 2);
  // The directory form (PAGODA_CGROUP_ROOT) reads one group's files.
  SystemMemory d;
  d.mem_available = 60 * GiB;
  read_cgroup_dir(f.dir + "/cg/memory/docker/abc", d);
  EXPECT_EQ(d.available(), GiB + GiB / 2);
}

TEST(KvConfig, DefaultBudgetIsWhatIsLeftBesideTheWeightsLessHeadroom) {
  SystemMemory m;
  m.mem_total = 24 * GiB;
  m.mem_available = 20 * GiB;
  // headroom = max(512 MiB, 10% of 24 GiB) = 2.4 GiB
  const uint64_t headroom = static_cast<uint64_t>(24.0 * GiB * kKvHeadroomFraction);
  KvBudgetChoice c = choose_kv_budget(0, m, 4 * GiB);
  EXPECT_EQ(c.bytes, 20 * GiB - 4 * GiB - headroom);
  EXPECT_FALSE(c.capped);
  // In a container: the cgroup's room decides.
  m.cgroup_limited = true;
  m.cgroup_limit = 6 * GiB;
  m.cgroup_usage = 1 * GiB;
  c = choose_kv_budget(0, m, 1 * GiB);
  EXPECT_EQ(c.bytes, 5 * GiB - 1 * GiB - std::max<uint64_t>(kKvMinHeadroomBytes, static_cast<uint64_t>(6.0 * GiB * kKvHeadroomFraction)));
  // Nothing left: a one-line error that says why.
  try {
    choose_kv_budget(0, m, 5 * GiB);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not enough memory"), std::string::npos) << e.what();
  }
}

TEST(KvConfig, ARequestLargerThanMemoryAllowsIsCappedWithAWarning) {
  SystemMemory m;
  m.mem_total = 24 * GiB;
  m.mem_available = 22 * GiB;
  KvBudgetChoice c = choose_kv_budget(100 * GiB, m, 0);
  EXPECT_TRUE(c.capped);
  EXPECT_EQ(c.bytes, c.usable);
  EXPECT_LT(c.bytes, 22 * GiB);
  EXPECT_NE(c.warning.find("100.00 GiB is more than memory allows; using"), std::string::npos) << c.warning;
  c = choose_kv_budget(512ull << 20, m, 0);  // within: as asked
  EXPECT_FALSE(c.capped);
  EXPECT_EQ(c.bytes, 512ull << 20);
  EXPECT_TRUE(c.warning.empty());
  // Nothing known about memory: a request is used as given, the default is an error.
  const SystemMemory unknown;
  EXPECT_EQ(choose_kv_budget(12345, unknown, 0).bytes, 12345u);
  EXPECT_THROW(choose_kv_budget(0, unknown, 0), Error);
  KvConfig k;
  k.budget_bytes = 12345;
  EXPECT_EQ(resolve_kv_budget(k), 12345u);
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

}  // namespace
}  // namespace pagoda
