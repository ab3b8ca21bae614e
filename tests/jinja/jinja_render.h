// Test helper for the Jinja engine's tests: renders a template with JSON variables.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/template.h"

namespace pagoda::jinja_test {

using nlohmann::ordered_json;

inline std::string render(const std::string& src, const ordered_json& ctx = ordered_json::object(),
                          jinja::Limits limits = {}) {
  jinja::Template t(src, limits);
  std::vector<std::pair<std::string, jinja::Value>> vars;
  for (auto it = ctx.begin(); it != ctx.end(); ++it) vars.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  return t.render(vars);
}

}  // namespace pagoda::jinja_test
