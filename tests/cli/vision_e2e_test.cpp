// Images in chat through `pagoda serve --mmproj` on a synthetic Gemma 3 and its projector
// (pagoda synth --mmproj): OpenAI image_url parts, Anthropic image blocks and Responses
// input_image give the same answer for the same picture; a conversation resending an image
// hits the prefix cache past it and another image shares nothing past its start; the
// encoder's cache is booked in bytes; bad images, bad URLs and a model without a projector
// are 400s in each API's shape, and the server keeps serving. `-m hf://` (a stand-in Hub on
// loopback) brings the repo's projector; an unusable one leaves a text server with a warning.
// --allow-image-urls fetches http(s) images (a stand-in server on loopback); failures are 400s
// naming the host and the reason.
// (Side by side with llama-server on the same files: bench/vision_parity.sh.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "hub/fake_hub.h"
#include "hub/stand_in_http.h"
#include "image/image_encoders.h"
#include "server_process.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
using testing::http;
using testing::ServerProcess;

std::string png_url(const RgbImage& img) { return test::png_data_url(img); }
using test::base64;

class VisionE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = "/tmp/pagoda_vision_e2e_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    const std::string cmd = std::string(PAGODA_BINARY) + " synth --arch gemma3 --dim 128 --layers 2 --heads 4 " +
                            "--kv-heads 2 --ffn 256 -o " + dir_ + "/model.gguf --mmproj " + dir_ + "/mmproj.gguf " +
                            "--mmproj-image-size 56 --mmproj-dim 64 --mmproj-layers 2 --mmproj-heads 4 " +
                            "--mmproj-ffn 128 --mmproj-merge 2 >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    server_ = new ServerProcess({"-m", dir_ + "/model.gguf", "--mmproj", dir_ + "/mmproj.gguf", "--threads", "2",
                                 "--max-images", "2", "--image-max-pixels", "1000000"});
    port_ = server_->start();
    ASSERT_NE(port_, 0) << server_->log();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::filesystem::remove_all(dir_);
  }
  static json chat(const json& content, int expect = 200) {
    json body{{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 6}, {"temperature", 0},
              {"logprobs", true}};
    const auto r = http(port_, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, expect) << r.body;
    return json::parse(r.body, nullptr, false);
  }
  static json cache_stats() { return json::parse(http(port_, "GET", "/v1/cache/stats").body); }

  static inline std::string dir_;
  static inline ServerProcess* server_ = nullptr;
  static inline uint16_t port_ = 0;
};

json parts(const std::string& text, const std::string& url) {
  return json::array({{{"type", "text"}, {"text", text}}, {{"type", "image_url"}, {"image_url", {{"url", url}}}}});
}

TEST_F(VisionE2E, TheSameImageHitsTheCachePastItAndAnotherSharesNothingPastItsStart) {
  const std::string a = png_url(test::gradient_image(56, 56)), b = png_url(test::random_image(56, 56, 3));
  const json first = chat(parts("What is in this picture?", a));
  const int64_t prompt = first["usage"]["prompt_tokens"].get<int64_t>();
  const json again = chat(parts("What is in this picture?", a));
  EXPECT_EQ(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt - 1);
  const json other = chat(parts("What is in this picture?", b));
  const int64_t other_cached = other["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  EXPECT_LT(other_cached, prompt - 4 - 20);  // not past the image's 4 tokens (and its end text)
  EXPECT_NE(other["choices"][0]["logprobs"], first["choices"][0]["logprobs"]);
  // The same pixels as a JPEG-free re-encoding (interlaced PNG): the same image to the cache.
  const json interlaced =
      chat(parts("What is in this picture?",
                 "data:image/png;base64," + base64(test::encode_png_rgb(test::gradient_image(56, 56), true))));
  EXPECT_EQ(interlaced["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt - 1);
  // The encoder ran twice (a, b): the rest came from its cache, booked at its rows' bytes.
  const json images = cache_stats()["images"];
  EXPECT_EQ(images["encoded"], 2) << images.dump();
  EXPECT_EQ(images["hits"], 2) << images.dump();
  // 4 rows of 128 floats + 4 placeholder ids + a 32-byte key, per image.
  EXPECT_EQ(images["bytes"], 2 * (4 * 128 * 4 + 4 * 4 + 32)) << images.dump();
}

TEST_F(VisionE2E, AnthropicAndResponsesImagesAnswerAsChatDoes) {
  const RgbImage img = test::random_image(80, 40, 9);  // not square: fitted and padded
  const std::string data = base64(test::encode_png_rgb(img));
  const json want = chat(parts("Describe.", "data:image/png;base64," + data));
  json msg{{"model", "m"},
           {"max_tokens", 6},
           {"temperature", 0},
           {"messages",
            {{{"role", "user"},
              {"content",
               {{{"type", "text"}, {"text", "Describe."}},
                {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", data}}}}}}}}}};
  const auto ar = http(port_, "POST", "/v1/messages", msg.dump());
  ASSERT_EQ(ar.status, 200) << ar.body;
  const json a = json::parse(ar.body);
  EXPECT_EQ(a["usage"]["input_tokens"].get<int64_t>() + a["usage"]["cache_read_input_tokens"].get<int64_t>(),
            want["usage"]["prompt_tokens"].get<int64_t>());
  json resp{{"max_output_tokens", 16},
            {"temperature", 0},
            {"input",
             {{{"role", "user"},
               {"content",
                {{{"type", "input_text"}, {"text", "Describe."}},
                 {{"type", "input_image"}, {"image_url", "data:image/png;base64," + data}}}}}}}};
  const auto rr = http(port_, "POST", "/v1/responses", resp.dump());
  ASSERT_EQ(rr.status, 200) << rr.body;
  EXPECT_EQ(json::parse(rr.body)["usage"]["input_tokens"], want["usage"]["prompt_tokens"]);
}

TEST_F(VisionE2E, BadImagesAreFourHundredsThatSayWhy) {
  const std::vector<uint8_t> png = test::encode_png_rgb(test::gradient_image(56, 56));
  struct Case {
    json content;
    std::string says;
  };
  // A PNG claiming 60000 x 60000 pixels in a few bytes (its IHDR rewritten, CRC and all).
  std::vector<uint8_t> bomb = png;
  for (int i = 0; i < 2; ++i) {
    const uint32_t side = 60000;
    for (int k = 0; k < 4; ++k) bomb[16 + 4 * i + k] = static_cast<uint8_t>(side >> (24 - 8 * k));
  }
  const uint32_t crc = static_cast<uint32_t>(::crc32(0, bomb.data() + 12, 17));
  for (int k = 0; k < 4; ++k) bomb[29 + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
  const std::vector<uint8_t> truncated(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2));
  const std::string gif = base64({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
  const std::vector<Case> cases = {
      {parts("x", "data:image/png;base64," + base64(truncated)), "image:"},
      {parts("x", "data:image/png;base64," + base64(bomb)), "limit"},
      {parts("x", "data:image/gif;base64," + gif), "unsupported image format gif"},
      {parts("x", "data:image/png;base64,!!!notbase64"), "base64"},
      {parts("x", "https://example.com/cat.png"), "remote image URLs are not fetched"},
      {parts("x", "file:///etc/passwd"), "must be a data: URL"},
      {json::array({{{"type", "image_url"}, {"image_url", {{"url", png_url(test::gradient_image(56, 56))}}}},
                    {{"type", "image_url"}, {"image_url", {{"url", png_url(test::gradient_image(56, 56))}}}},
                    {{"type", "image_url"}, {"image_url", {{"url", png_url(test::gradient_image(56, 56))}}}}}),
       "at most 2 images"},
      {json::array({{{"type", "text"}, {"text", "a <__media__> marker"}}}), ""},  // no images: plain text, 200
      {json::array({{{"type", "text"}, {"text", "<__media__>"}},
                    {{"type", "image_url"}, {"image_url", {{"url", png_url(test::gradient_image(56, 56))}}}}}),
       "image marker"},
      {json::array({{{"type", "image_url"}}}), "image_url"},
  };
  for (const Case& c : cases) {
    json body{{"messages", {{{"role", "user"}, {"content", c.content}}}}, {"max_tokens", 2}};
    const auto r = http(port_, "POST", "/v1/chat/completions", body.dump());
    if (c.says.empty()) {
      EXPECT_EQ(r.status, 200) << r.body;
      continue;
    }
    EXPECT_EQ(r.status, 400) << c.says << ": " << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error") << r.body;
  }
  // Anthropic's shape for the same refusal.
  json msg{{"model", "m"},
           {"max_tokens", 2},
           {"messages",
            {{{"role", "user"},
              {"content",
               {{{"type", "image"},
                 {"source", {{"type", "base64"}, {"media_type", "image/gif"}, {"data", gif}}}}}}}}}};
  const auto ar = http(port_, "POST", "/v1/messages", msg.dump());
  EXPECT_EQ(ar.status, 400) << ar.body;
  EXPECT_EQ(json::parse(ar.body)["type"], "error") << ar.body;
  // Still serving.
  chat(parts("Still there?", png_url(test::gradient_image(56, 56))));
}

TEST(VisionE2ENoProjector, AnImageForAModelWithoutAProjectorIsAFourHundred) {
  const std::string dir = "/tmp/pagoda_vision_noproj_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_EQ(std::system((std::string(PAGODA_BINARY) + " synth --arch gemma3 --dim 64 --layers 1 --heads 2 --kv-heads 1 " +
                         "--ffn 128 -o " + dir + "/m.gguf >/dev/null 2>&1").c_str()),
            0);
  ServerProcess s({"-m", dir + "/m.gguf", "--threads", "1"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  json body{{"messages", {{{"role", "user"}, {"content", parts("x", png_url(test::gradient_image(8, 8)))}}}},
            {"max_tokens", 2}};
  const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--mmproj"), std::string::npos) << r.body;
  // A projector for another model width, or not a projector at all: one-line load errors.
  std::filesystem::remove_all(dir);
}

// dir/m.gguf and dir/mmproj.gguf: the smallest Gemma 3 and projector (one image token).
bool synth_tiny_gemma3(const std::string& dir) {
  std::filesystem::create_directories(dir);
  return std::system((std::string(PAGODA_BINARY) + " synth --arch gemma3 --dim 64 --layers 1 --heads 2 --kv-heads 1 " +
                      "--ffn 128 -o " + dir + "/m.gguf --mmproj " + dir + "/mmproj.gguf --mmproj-image-size 28 " +
                      "--mmproj-dim 32 --mmproj-layers 1 --mmproj-heads 2 --mmproj-ffn 64 --mmproj-merge 2 " +
                      ">/dev/null 2>&1").c_str()) == 0;
}

TEST(VisionE2EHub, AnHfRepoBringsItsProjectorAndAnUnusableOneLeavesTextOnly) {
  const std::string dir = "/tmp/pagoda_vision_hub_" + std::to_string(::getpid());
  ASSERT_TRUE(synth_tiny_gemma3(dir));
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  hub::testing::FakeHub hub;
  hub::testing::FakeRepo good;
  good.files["m-Q8_0.gguf"] = {slurp(dir + "/m.gguf"), true};
  good.files["mmproj-m-F16.gguf"] = {slurp(dir + "/mmproj.gguf"), true};
  good.files["mmproj-m-F32.gguf"] = {"GGUF: not the one chosen", true};
  hub.add_repo("o/vision", good);
  hub::testing::FakeRepo bad = good;
  bad.files.erase("mmproj-m-F32.gguf");
  bad.files["mmproj-m-F16.gguf"] = {"GGUF but not a projector", true};
  hub.add_repo("o/bad-projector", bad);
  auto env = [&](const std::string& cache) {
    return std::vector<std::string>{"HF_ENDPOINT=" + hub.endpoint(), "HF_HUB_CACHE=" + dir + "/" + cache,
                                    "HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_HUB_OFFLINE=0"};
  };
  auto image_chat = [](uint16_t port) {
    json body{{"messages", {{{"role", "user"}, {"content", parts("x", png_url(test::gradient_image(8, 8)))}}}},
              {"max_tokens", 2}};
    return http(port, "POST", "/v1/chat/completions", body.dump());
  };
  const std::string snapshot = "/snapshots/" + hub::testing::FakeRepo().commit + "/";
  {
    ServerProcess s({"-m", "hf://o/vision", "--threads", "1"}, env("c1"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    EXPECT_NE(s.log().find("images: gemma3 projector " + dir + "/c1/models--o--vision" + snapshot + "mmproj-m-F16.gguf"),
              std::string::npos)
        << s.log();
    EXPECT_EQ(image_chat(port).status, 200);
  }
  {  // -hf OWNER/REPO --no-mmproj: nothing fetched, no images.
    ServerProcess s({"-hf", "o/vision", "--no-mmproj", "--threads", "1"}, env("c2"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    EXPECT_FALSE(std::filesystem::exists(dir + "/c2/models--o--vision" + snapshot + "mmproj-m-F16.gguf"));
    EXPECT_EQ(image_chat(port).status, 400);
  }
  {  // The repo's projector cannot be loaded: one warning, a text server.
    ServerProcess s({"-m", "hf://o/bad-projector", "--threads", "1"}, env("c3"));
    const uint16_t port = s.start();
    ASSERT_NE(port, 0) << s.log();
    EXPECT_NE(s.log().find("warning: not using the repo's projector"), std::string::npos) << s.log();
    EXPECT_EQ(image_chat(port).status, 400);
  }
  {  // ... but an explicit --mmproj that fails stays an error.
    ServerProcess s({"-m", "hf://o/vision", "--mmproj", dir + "/m.gguf", "--threads", "1"}, env("c3"));
    EXPECT_NE(s.wait_exit(60), 0);
    EXPECT_EQ(s.log().find("ready:"), std::string::npos) << s.log();
    EXPECT_FALSE(std::filesystem::exists(dir + "/c3/models--o--vision" + snapshot + "mmproj-m-F16.gguf"));
  }
  std::filesystem::remove_all(dir);
}

TEST(VisionE2EUrls, AllowImageUrlsFetchesHttpImagesAndFailuresAreFourHundreds) {
  const std::string dir = "/tmp/pagoda_vision_urls_" + std::to_string(::getpid());
  ASSERT_TRUE(synth_tiny_gemma3(dir));
  const std::vector<uint8_t> png = test::encode_png_rgb(test::gradient_image(28, 28));
  using hub::testing::StandInHttp;
  StandInHttp images([&](const std::string& target, int fd) {
    if (target == "/cat.png")
      StandInHttp::send_all(fd, StandInHttp::response(200, "Content-Type: image/png\r\n", std::string(png.begin(), png.end())));
    else if (target == "/to-file")
      StandInHttp::send_all(fd, StandInHttp::response(302, "Location: file:///etc/passwd\r\n", ""));
    else if (target == "/big.png")
      StandInHttp::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\nConnection: close\r\n\r\n");
    else
      StandInHttp::send_all(fd, StandInHttp::response(404, "", "no"));
  });
  ServerProcess s({"-m", dir + "/m.gguf", "--mmproj", dir + "/mmproj.gguf", "--allow-image-urls", "--image-max-bytes",
                   "1MiB", "--threads", "1"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  auto image_chat = [&](const std::string& url) {
    json body{{"messages", {{{"role", "user"}, {"content", parts("x", url)}}}}, {"max_tokens", 2}, {"temperature", 0}};
    return http(port, "POST", "/v1/chat/completions", body.dump());
  };
  const auto fetched = image_chat(images.url("/cat.png"));
  EXPECT_EQ(fetched.status, 200) << fetched.body;
  // The same picture inline: the same prompt, so the prefix cache takes all but the last token.
  const auto inline_png = image_chat("data:image/png;base64," + base64(png));
  EXPECT_EQ(inline_png.status, 200) << inline_png.body;
  const json j = json::parse(inline_png.body);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            j["usage"]["prompt_tokens"].get<int64_t>() - 1);
  for (const auto& [target, reason] : std::vector<std::pair<std::string, std::string>>{
           {"/missing.png", "cannot fetch the image from 127.0.0.1: HTTP 404"},
           {"/to-file", "file:///etc/passwd"},
           {"/big.png", "cannot fetch the image from 127.0.0.1: larger than the limit of 1048576 bytes"}}) {
    const auto r = image_chat(images.url(target));
    EXPECT_EQ(r.status, 400) << target << ": " << r.body;
    EXPECT_NE(r.body.find(reason), std::string::npos) << r.body;
  }
  EXPECT_EQ(image_chat("http://127.0.0.1:1/x.png").status, 400);  // nothing listening
  EXPECT_EQ(image_chat(images.url("/cat.png")).status, 200);      // and still serving
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
