// Images in chat for Qwen 3.5 through `pagoda serve --mmproj` on a synthetic qwen35 (its
// tiny hybrid shape, Qwen3's vocabulary from ../shared) and a qwen3vl_merger projector
// (pagoda synth --mmproj): dynamic resolution (an image's token count follows its size), a
// second turn resending the image hits the prefix cache past it, another image shares
// nothing past its start, the encoder's cache is booked in bytes, and a projector for the
// wrong model is refused at start. (Side by side with llama-server on the same files:
// bench/vision_parity.sh ... qwen35.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "image/image_encoders.h"
#include "server_process.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
using testing::http;
using testing::ServerProcess;

const std::string kQwen3Vocab = std::string(PAGODA_SHARED_DIR) + "/models/qwen3-tokenizer";

class VisionQwenE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kQwen3Vocab)) return;
    dir_ = "/tmp/pagoda_vision_qwen_e2e_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    const std::string cmd = std::string(PAGODA_BINARY) + " synth --arch qwen35 --shape tiny --vocab-from " +
                            kQwen3Vocab + " -o " + dir_ + "/model.gguf --mmproj " + dir_ + "/mmproj.gguf " +
                            "--mmproj-image-size 64 --mmproj-dim 64 --mmproj-layers 2 --mmproj-heads 4 " +
                            "--mmproj-ffn 128 >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    server_ = new ServerProcess({"-m", dir_ + "/model.gguf", "--mmproj", dir_ + "/mmproj.gguf", "--threads", "2"});
    port_ = server_->start();
    ASSERT_NE(port_, 0) << server_->log();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (!std::filesystem::exists(kQwen3Vocab)) GTEST_SKIP() << kQwen3Vocab << " is missing";
  }
  static json chat(const json& messages, int expect = 200) {
    json body{{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}};
    const auto r = http(port_, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, expect) << r.body;
    return json::parse(r.body, nullptr, false);
  }
  static json user(const std::string& url) {
    return {{"role", "user"},
            {"content", json::array({{{"type", "text"}, {"text", "What is in this picture?"}},
                                     {{"type", "image_url"}, {"image_url", {{"url", url}}}}})}};
  }
  static int64_t prompt_tokens(const json& r) { return r["usage"]["prompt_tokens"].get<int64_t>(); }
  static int64_t cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }

  static inline std::string dir_;
  static inline ServerProcess* server_ = nullptr;
  static inline uint16_t port_ = 0;
};

TEST_F(VisionQwenE2E, TokensFollowTheImagesSizeAndTheCacheHoldsPastIt) {
  const std::string a = test::png_data_url(test::gradient_image(112, 112));     // fitted to 128 x 128: 16 tokens
  const std::string wide = test::png_data_url(test::gradient_image(200, 120));  // 192 x 128: 24 tokens
  const json first = chat(json::array({user(a)}));
  const int64_t n = prompt_tokens(first);
  const json w = chat(json::array({user(wide)}));
  EXPECT_EQ(prompt_tokens(w), n - 16 + 24);
  // A second turn: the first exchange resent, then a question. The image's last token is 7
  // before the end of the first prompt (<|vision_end|><|im_end|>\n<|im_start|>assistant\n
  // after it); the hit must reach past it (seen: 35 of 50 cached after a 32-token first
  // prompt: the answer's tokens too).
  json turn2 = json::array({user(a), {{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}},
                            {{"role", "user"}, {"content", "And the colours?"}}});
  const json second = chat(turn2);
  EXPECT_GE(cached(second), n - 6) << second.dump();
  // Another image of the same size: nothing shared past its start (the text before it, ~9
  // tokens, at most a block).
  const json other = chat(json::array({user(test::png_data_url(test::random_image(112, 112, 5)))}));
  EXPECT_EQ(prompt_tokens(other), n);
  EXPECT_LT(cached(other), n - 16 - 2) << other.dump();
  // Encoded: a, wide, the other; booked at rows x width x 4 + ids x 4 + a 32-byte key each.
  const json images = json::parse(http(port_, "GET", "/v1/cache/stats").body)["images"];
  EXPECT_EQ(images["encoded"], 3) << images.dump();
  const int64_t rows = 16 + 24 + 16, bytes = images["bytes"].get<int64_t>();
  const int64_t dim = (bytes - rows * 4 - 3 * 32) / (rows * 4);
  EXPECT_EQ(bytes, rows * dim * 4 + rows * 4 + 3 * 32) << images.dump();
  EXPECT_GT(dim, 0);
}

// The same width as the Qwen model's (128), so the family check is what refuses it.
TEST_F(VisionQwenE2E, AGemmaProjectorIsRefusedForAQwenModel) {
  const std::string g = dir_ + "/gemma";
  std::filesystem::create_directories(g);
  ASSERT_EQ(std::system((std::string(PAGODA_BINARY) + " synth --arch gemma3 --dim 128 --layers 1 --heads 2 --kv-heads 1 " +
                         "--ffn 128 -o " + g + "/m.gguf --mmproj " + g + "/p.gguf --mmproj-image-size 28 " +
                         "--mmproj-dim 32 --mmproj-layers 1 --mmproj-heads 2 --mmproj-ffn 64 --mmproj-merge 2 " +
                         ">/dev/null 2>&1")
                            .c_str()),
            0);
  ServerProcess s({"-m", dir_ + "/model.gguf", "--mmproj", g + "/p.gguf", "--threads", "1"});
  EXPECT_EQ(s.start(), 0);
  EXPECT_NE(s.log().find("projector feeds gemma3 models, not qwen35"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace pagoda
