// Which files a model name picks (hub/file_select.h), model-name parsing, and the environment
// as huggingface_hub reads it. Pure functions: no network, no files (except HF_TOKEN_PATH).
#include "hub/file_select.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "common/error.h"
#include "hub/error_text.h"
#include "hub/hub.h"

namespace pagoda::hub {
namespace {

ModelRef ref(const std::string& text) { return ModelRef::parse(text); }

using testing::error_of;

const std::vector<std::string> kBartowskiStyle = {
    ".gitattributes",          "README.md",
    "Model-7B-IQ4_XS.gguf",    "Model-7B-Q4_K_M.gguf",
    "Model-7B-Q4_K_S.gguf",    "Model-7B-Q8_0.gguf",
    "Model-7B-f16.gguf",       "mmproj-Model-7B-f16.gguf",
};

TEST(ModelRefParse, AcceptsRepoQuantAndFileForms) {
  EXPECT_EQ(ref("owner/repo").repo_id, "owner/repo");
  EXPECT_EQ(ref("hf://owner/repo:Q4_K_M").quant, "Q4_K_M");
  EXPECT_EQ(ref("hf://owner/repo:Q4_K_M").repo_id, "owner/repo");
  ModelRef f = ref("hf://owner/Repo.v2-GGUF/sub/dir/model.gguf");
  EXPECT_EQ(f.repo_id, "owner/Repo.v2-GGUF");
  EXPECT_EQ(f.file, "sub/dir/model.gguf");
  EXPECT_EQ(f.revision, "main");
  EXPECT_EQ(f.to_string(), "owner/Repo.v2-GGUF/sub/dir/model.gguf");
  EXPECT_TRUE(is_hub_uri("hf://a/b"));
  EXPECT_FALSE(is_hub_uri("/models/a.gguf"));
}

TEST(ModelRefParse, RejectsNamesThatCouldEscapeTheCache) {
  for (const char* bad : {"repo", "hf://", "a/", "/b", "a/../b", "../a/b", "a/b/../../x", "a/b:", "a b/c", "a/b/",
                          "a--x/b", "a/b:Q4 K", "a/b/./c", "a/b/c//d"}) {
    EXPECT_NE(error_of([&] { ModelRef::parse(bad); }).find("bad model name"), std::string::npos) << bad;
  }
}

TEST(FileSelect, TagPicksTheFileCaseInsensitively) {
  FileSelection s = select_files("o/r", kBartowskiStyle, ref("o/r:q8_0"));
  EXPECT_EQ(s.files, std::vector<std::string>{"Model-7B-Q8_0.gguf"});
  EXPECT_EQ(s.model_file, "Model-7B-Q8_0.gguf");
  EXPECT_EQ(s.gguf_parts, 1);
}

TEST(FileSelect, WholeTokenMatchBeatsSubstring) {
  const std::vector<std::string> files = {"m-Q4_K.gguf", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf"};
  EXPECT_EQ(select_files("o/r", files, ref("o/r:Q4_K")).model_file, "m-Q4_K.gguf");
  // Only substrings: ambiguous, so the error names both and how to pick one.
  const std::string e = error_of([&] { select_files("o/r", {"m-Q4_K_M.gguf", "m-Q4_K_S.gguf"}, ref("o/r:Q4_K")); });
  EXPECT_NE(e.find("matches several"), std::string::npos) << e;
  EXPECT_NE(e.find("m-Q4_K_M.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("o/r/FILE"), std::string::npos) << e;
}

TEST(FileSelect, DefaultIsQ4KMThenPreferenceListThenFirst) {
  EXPECT_EQ(select_files("o/r", kBartowskiStyle, ref("o/r")).model_file, "Model-7B-Q4_K_M.gguf");
  EXPECT_EQ(select_files("o/r", {"a-Q8_0.gguf", "a-Q4_0.gguf"}, ref("o/r")).model_file, "a-Q4_0.gguf");
  EXPECT_EQ(select_files("o/r", {"b-F16.gguf", "a-BF16.gguf"}, ref("o/r")).model_file, "a-BF16.gguf");
}

TEST(FileSelect, ProjectorFilesAreNeverTheModel) {
  EXPECT_EQ(select_files("o/r", {"mmproj-Q4_K_M.gguf", "m-Q8_0.gguf"}, ref("o/r")).model_file, "m-Q8_0.gguf");
  const std::string e = error_of([&] { select_files("o/r", {"mmproj-F16.gguf", "m-Q8_0.gguf"}, ref("o/r:F16")); });
  EXPECT_NE(e.find("no GGUF file for quant 'F16'"), std::string::npos) << e;
}

TEST(SelectMmproj, NoneWhenTheRepoHasNoProjector) {
  EXPECT_EQ(select_mmproj({"m-Q4_K_M.gguf", "m-Q8_0.gguf", "README.md"}, "m-Q4_K_M.gguf"), "");
  // Not a GGUF, or a split part: not a projector llama.cpp would load either.
  EXPECT_EQ(select_mmproj({"m-Q4_K_M.gguf", "mmproj.md", "mmproj-F16-00001-of-00002.gguf"}, "m-Q4_K_M.gguf"), "");
}

TEST(SelectMmproj, TheModelsQuantThenF16ThenBF16ThenF32ThenTheFirst) {
  const std::vector<std::string> all = {"m-Q4_K_M.gguf",        "m-Q8_0.gguf",         "mmproj-m-BF16.gguf",
                                        "mmproj-m-F16.gguf",    "mmproj-m-F32.gguf",   "mmproj-m-Q8_0.gguf"};
  EXPECT_EQ(select_mmproj(all, "m-Q8_0.gguf"), "mmproj-m-Q8_0.gguf");
  EXPECT_EQ(select_mmproj(all, "m-Q4_K_M.gguf"), "mmproj-m-F16.gguf");
  // F16 is a whole token: "BF16" does not count as F16.
  EXPECT_EQ(select_mmproj({"m-Q4_K_M.gguf", "mmproj-m-BF16.gguf", "mmproj-m-F32.gguf"}, "m-Q4_K_M.gguf"),
            "mmproj-m-BF16.gguf");
  EXPECT_EQ(select_mmproj({"m-Q4_K_M.gguf", "mmproj-m-F32.gguf", "mmproj-m-Q8_0.gguf"}, "m-Q4_K_M.gguf"),
            "mmproj-m-F32.gguf");
  EXPECT_EQ(select_mmproj({"m-Q4_K_M.gguf", "mmproj-m-Q8_0.gguf", "mmproj-m-Q6_K.gguf"}, "m-Q4_K_M.gguf"),
            "mmproj-m-Q6_K.gguf");  // name order
  // Case-insensitive, as the Hub's repos spell it (bartowski: mmproj-...-f16.gguf).
  EXPECT_EQ(select_mmproj(kBartowskiStyle, "Model-7B-Q4_K_M.gguf"), "mmproj-Model-7B-f16.gguf");
  EXPECT_EQ(select_mmproj({"m-q8_0.gguf", "MMPROJ-F16.gguf", "mmproj-q8_0.gguf"}, "m-q8_0.gguf"), "mmproj-q8_0.gguf");
  // A split model's quant is read from its name without the part suffix.
  EXPECT_EQ(select_mmproj({"m-Q8_0-00001-of-00002.gguf", "mmproj-F16.gguf", "mmproj-Q8_0.gguf"},
                          "m-Q8_0-00001-of-00002.gguf"),
            "mmproj-Q8_0.gguf");
}

TEST(SelectMmproj, TheModelsFolderOrTheDeepestFolderAboveIt) {
  const std::vector<std::string> files = {"Q4/m-Q4_K_M.gguf", "Q4/mmproj-Q8_0.gguf", "mmproj-F16.gguf",
                                          "Q8/m-Q8_0.gguf",   "other/mmproj-F16.gguf"};
  EXPECT_EQ(select_mmproj(files, "Q4/m-Q4_K_M.gguf"), "Q4/mmproj-Q8_0.gguf");  // its own folder beats F16 above
  EXPECT_EQ(select_mmproj(files, "Q8/m-Q8_0.gguf"), "mmproj-F16.gguf");        // never another quant's folder
  EXPECT_EQ(select_mmproj({"m-Q8_0.gguf", "sub/mmproj-F16.gguf"}, "m-Q8_0.gguf"), "");
  // "Q4" is not a folder above "Q4x/...".
  EXPECT_EQ(select_mmproj({"Q4x/m-Q8_0.gguf", "Q4/mmproj-F16.gguf"}, "Q4x/m-Q8_0.gguf"), "");
}

TEST(FileSelect, UnknownQuantListsTheQuantsThatExist) {
  const std::string e = error_of([&] { select_files("o/r", kBartowskiStyle, ref("o/r:Q3_K_L")); });
  EXPECT_EQ(e, "o/r has no GGUF file for quant 'Q3_K_L' (quants: F16, IQ4_XS, Q4_K_M, Q4_K_S, Q8_0)");
}

TEST(FileSelect, SplitGgufBringsEveryPart) {
  const std::vector<std::string> files = {"Q8_0/m-Q8_0-00002-of-00003.gguf", "Q8_0/m-Q8_0-00001-of-00003.gguf",
                                          "Q8_0/m-Q8_0-00003-of-00003.gguf", "m-Q4_K_M.gguf"};
  FileSelection s = select_files("o/r", files, ref("o/r:Q8_0"));
  EXPECT_EQ(s.gguf_parts, 3);
  EXPECT_EQ(s.model_file, "Q8_0/m-Q8_0-00001-of-00003.gguf");
  EXPECT_EQ(s.files.size(), 3u);
  EXPECT_EQ(s.files[2], "Q8_0/m-Q8_0-00003-of-00003.gguf");
  // Naming one part by path still brings all three.
  EXPECT_EQ(select_files("o/r", files, ref("o/r/Q8_0/m-Q8_0-00002-of-00003.gguf")).files.size(), 3u);
  // A split with a part missing from the listing is not offered.
  const std::string e = error_of([&] {
    select_files("o/r", {"m-Q8_0-00001-of-00002.gguf", "m-Q4_0.gguf"}, ref("o/r:Q8_0"));
  });
  EXPECT_NE(e.find("quants: Q4_0"), std::string::npos) << e;
}

TEST(FileSelect, ExplicitFileMustExist) {
  EXPECT_EQ(select_files("o/r", kBartowskiStyle, ref("o/r/README.md")).files, std::vector<std::string>{"README.md"});
  const std::string e = error_of([&] { select_files("o/r", kBartowskiStyle, ref("o/r/nope.gguf")); });
  EXPECT_NE(e.find("o/r has no file 'nope.gguf' (GGUF files: Model-7B-IQ4_XS.gguf"), std::string::npos) << e;
}

TEST(FileSelect, SafetensorsRepoTakesConfigTokenizerAndIndex) {
  const std::vector<std::string> files = {
      ".gitattributes", "README.md", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors", "model.safetensors.index.json", "special_tokens_map.json",
      "tokenizer.json", "tokenizer_config.json", "original/consolidated.00.pth"};
  FileSelection s = select_files("o/r", files, ref("o/r"));
  EXPECT_EQ(s.files, (std::vector<std::string>{"config.json", "generation_config.json", "tokenizer.json",
                                               "tokenizer_config.json", "special_tokens_map.json",
                                               "model.safetensors.index.json"}));
  EXPECT_EQ(s.safetensors_index, "model.safetensors.index.json");
  EXPECT_EQ(s.model_file, "");
  EXPECT_EQ(s.gguf_parts, 0);
  FileSelection single = select_files("o/r", {"config.json", "model.safetensors", "tokenizer.json"}, ref("o/r"));
  EXPECT_EQ(single.files, (std::vector<std::string>{"config.json", "tokenizer.json", "model.safetensors"}));
  EXPECT_NE(error_of([&] { select_files("o/r", files, ref("o/r:Q4_K_M")); }).find("drop ':Q4_K_M'"), std::string::npos);
  EXPECT_NE(error_of([&] { select_files("o/r", {"README.md"}, ref("o/r")); }).find("neither GGUF files nor config.json"),
            std::string::npos);
}

TEST(FileSelect, IndexNamesEachShardOnce) {
  const std::string index = R"({"metadata":{"total_size":10},"weight_map":{
      "a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
      "c":"model-00001-of-00002.safetensors"}})";
  EXPECT_EQ(shards_from_index(index, "model.safetensors.index.json"),
            (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(shards_from_index(index, "sub/model.safetensors.index.json")[0], "sub/model-00001-of-00002.safetensors");
  EXPECT_NE(error_of([] { shards_from_index(R"({"weight_map":{"a":"../../etc/passwd"}})", "i.json"); })
                .find("is not a file beside the index"),
            std::string::npos);
  EXPECT_NE(error_of([] { shards_from_index("{not json", "i.json"); }).find("not a safetensors index"), std::string::npos);
  EXPECT_NE(error_of([] { shards_from_index(R"({"weight_map":{}})", "i.json"); }).find("empty"), std::string::npos);
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    const char* old = getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(HubConfigFromEnv, DefaultsAreHuggingfaceHubs) {
  ScopedEnv env;
  for (const char* v : {"HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
                        "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                        "HF_HUB_DOWNLOAD_TIMEOUT", "HF_TOKEN_PATH"})
    env.set(v, nullptr);
  env.set("HOME", "/home/someone");
  env.set("HF_HOME", nullptr);
  HubConfig c = HubConfig::from_env();
  EXPECT_EQ(c.endpoint, "https://huggingface.co");
  EXPECT_EQ(c.cache_dir, "/home/someone/.cache/huggingface/hub");
  EXPECT_FALSE(c.offline);
  EXPECT_EQ(c.token, "");  // /home/someone/.cache/huggingface/token does not exist
  EXPECT_EQ(c.ca_bundle_file, "");
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(10000));
}

TEST(HubConfigFromEnv, ReadsEveryVariableWithHuggingfaceHubsPrecedence) {
  ScopedEnv env;
  const std::string dir = ::testing::TempDir() + "/hub_env_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/token") << "hf_fromfile\n"; }
  env.set("HF_HOME", dir.c_str());
  env.set("HF_HUB_CACHE", nullptr);
  env.set("HUGGINGFACE_HUB_CACHE", nullptr);
  env.set("HF_TOKEN", nullptr);
  env.set("HUGGING_FACE_HUB_TOKEN", nullptr);
  env.set("HF_TOKEN_PATH", nullptr);
  env.set("HF_ENDPOINT", "http://mirror.local:8080/");
  env.set("HF_HUB_OFFLINE", "TRUE");
  env.set("REQUESTS_CA_BUNDLE", "/etc/ca.pem");
  env.set("HF_HUB_DOWNLOAD_TIMEOUT", "2.5");
  HubConfig c = HubConfig::from_env();
  EXPECT_EQ(c.endpoint, "http://mirror.local:8080");
  EXPECT_EQ(c.cache_dir, std::filesystem::path(dir) / "hub");
  EXPECT_EQ(c.token, "hf_fromfile");  // $HF_HOME/token, trailing newline dropped
  EXPECT_TRUE(c.offline);
  EXPECT_EQ(c.ca_bundle_file, "/etc/ca.pem");
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(2500));
  env.set("HF_TOKEN", "hf_fromenv");
  env.set("HF_HUB_CACHE", "/elsewhere");
  env.set("HF_HUB_OFFLINE", "0");
  c = HubConfig::from_env();
  EXPECT_EQ(c.token, "hf_fromenv");
  EXPECT_EQ(c.cache_dir, "/elsewhere");
  EXPECT_FALSE(c.offline);
  env.set("HF_HUB_DOWNLOAD_TIMEOUT", "soon");
  EXPECT_NE(error_of([] { HubConfig::from_env(); }).find("HF_HUB_DOWNLOAD_TIMEOUT"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::hub
