// common/json_text.h: compact output, invalid UTF-8 replaced instead of thrown, the same
// for nlohmann::json and ordered_json (which keeps insertion order).
#include "common/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace pagoda {
namespace {

TEST(DumpJson, IsCompact) {
  const nlohmann::json j = {{"a", {1, 2}}, {"b", {{"c", nullptr}}}};
  EXPECT_EQ(dump_json(j), R"({"a":[1,2],"b":{"c":null}})");
}

TEST(DumpJson, OrderedJsonKeepsInsertionOrder) {
  nlohmann::ordered_json j;
  j["z"] = 1;
  j["a"] = "x";
  EXPECT_EQ(dump_json(j), R"({"z":1,"a":"x"})");
}

TEST(DumpJson, ReplacesInvalidUtf8InsteadOfThrowing) {
  const std::string bad = "a\xC3(\xFF";
  const nlohmann::json j = {{"s", bad}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what dump_json avoids
  EXPECT_EQ(dump_json(j), "{\"s\":\"a\xEF\xBF\xBD(\xEF\xBF\xBD\"}");
  EXPECT_EQ(dump_json(nlohmann::ordered_json(bad)), "\"a\xEF\xBF\xBD(\xEF\xBF\xBD\"");
}

TEST(DumpJson, KeepsValidUtf8AsIsAndEscapesControls) {
  EXPECT_EQ(dump_json(nlohmann::json("caf\xC3\xA9\n\x01")), "\"caf\xC3\xA9\\n\\u0001\"");
}

}  // namespace
}  // namespace pagoda
