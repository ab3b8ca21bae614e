// The SVG writer: well-formed XML (checked here by a small tag matcher and, where
// Debian's python3 is installed, by xml.etree), escaped labels, the right chart
// per workload.
#include "loadgen/svg_plot.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pagoda::loadgen {
namespace {

// Checks that tags nest and close, attribute values are quoted, and '&' only
// starts an entity. Returns "" when fine, else what is wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  bool root_seen = false;
  while (i < s.size()) {
    if (s[i] == '&') {
      size_t semi = s.find(';', i);
      std::string ent = s.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        return "bad entity at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    if (s[i] == '>') return "stray '>' at " + std::to_string(i);
    if (s[i] != '<') {
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) return "text outside the root";
      ++i;
      continue;
    }
    size_t end = i + 1;
    char quote = 0;
    for (; end < s.size(); ++end) {
      if (quote) {
        if (s[end] == quote) quote = 0;
        else if (s[end] == '<') return "'<' inside an attribute";
      } else if (s[end] == '"' || s[end] == '\'') {
        quote = s[end];
      } else if (s[end] == '>') {
        break;
      }
    }
    if (end == s.size()) return "unterminated tag";
    std::string tag = s.substr(i + 1, end - i - 1);
    if (!tag.empty() && tag[0] == '/') {
      std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + ">";
      stack.pop_back();
    } else if (!tag.empty() && tag.back() == '/') {
      if (stack.empty() && root_seen) return "second root";
      root_seen = true;
    } else {
      if (stack.empty() && root_seen) return "second root";
      root_seen = true;
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = end + 1;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return root_seen ? "" : "no root element";
}

void expect_parses_with_python(const std::string& svg) {
  if (!std::filesystem::exists("/usr/bin/python3")) return;
  auto path = std::filesystem::temp_directory_path() / ("loadgen_svg_" + std::to_string(::getpid()) + ".svg");
  std::ofstream(path) << svg;
  std::string cmd = "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                    "sys.exit(0 if r.tag == '{http://www.w3.org/2000/svg}svg' else 3)\" " + path.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << svg.substr(0, 400);
  std::filesystem::remove(path);
}

RunResults run_of(WorkloadKind kind, int n) {
  RunResults r;
  r.config.url = "http://127.0.0.1:8080";
  r.config.workload.kind = kind;
  r.config.label = "a & b <x>";
  for (int i = 0; i < n; ++i) {
    RequestRecord rec;
    rec.turn_idx = i % 3;
    rec.ttft_ms = 10 + i + 5 * rec.turn_idx;
    rec.e2e_ms = 100 + 3 * i;
    r.records.push_back(rec);
  }
  RequestRecord failed;
  failed.error = "timeout";
  r.records.push_back(failed);
  return r;
}

TEST(BenchSvgPlot, LatencyCdfIsWellFormedWithEscapedLabels) {
  std::string svg = results_plot_svg(run_of(WorkloadKind::kRandom, 25));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("a &amp; b &lt;x&gt;"), std::string::npos);
  EXPECT_NE(svg.find("Latency CDF"), std::string::npos);
  EXPECT_NE(svg.find("end-to-end"), std::string::npos);
  // Two series, each a step polyline.
  size_t lines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  expect_parses_with_python(svg);
}

TEST(BenchSvgPlot, MultiTurnDrawsTtftPerTurnWithABand) {
  std::string svg = results_plot_svg(run_of(WorkloadKind::kMultiTurn, 30));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("TTFT per turn"), std::string::npos);
  EXPECT_NE(svg.find("<polygon"), std::string::npos);
  size_t dots = 0;
  for (size_t p = svg.find("<circle"); p != std::string::npos; p = svg.find("<circle", p + 1)) ++dots;
  EXPECT_EQ(dots, 3u);  // turns 1..3
  expect_parses_with_python(svg);
}

TEST(BenchSvgPlot, TwoRunsShareOneChartNamedByLabel) {
  RunResults a = run_of(WorkloadKind::kMultiTurn, 12), b = run_of(WorkloadKind::kMultiTurn, 12);
  a.config.label = "cache off";
  b.config.label = "cache on";
  std::string svg = results_plot_svg({&a, &b});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("cache off vs cache on"), std::string::npos);
  size_t bands = 0;
  for (size_t p = svg.find("<polygon"); p != std::string::npos; p = svg.find("<polygon", p + 1)) ++bands;
  EXPECT_EQ(bands, 2u);
  // Turn ticks are whole numbers: no "1.5".
  EXPECT_EQ(svg.find(">1.5<"), std::string::npos);
  expect_parses_with_python(svg);
}

TEST(BenchSvgPlot, NoSuccessfulRequestsStillGivesAValidChart) {
  std::string svg = results_plot_svg(run_of(WorkloadKind::kSharedPrefix, 0));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("no data"), std::string::npos);
  expect_parses_with_python(svg);
}

TEST(BenchSvgPlot, NonFinitePointsAreDropped) {
  PlotSpec spec;
  spec.title = "t";
  PlotSeries s;
  s.name = "s";
  s.points = {{0, 1, 0, 0}, {1, std::nan(""), 0, 0}, {2, 3, 0, 0}, {INFINITY, 1, 0, 0}};
  spec.series.push_back(s);
  std::string svg = line_chart_svg(spec);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(BenchXmlChecker, CatchesBrokenDocuments) {
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg>a & b</svg>"), "");
  EXPECT_NE(xml_problem("<svg/><svg/>"), "");
  EXPECT_EQ(xml_problem("<svg><g a=\"1\"/></svg>"), "");
}

}  // namespace
}  // namespace pagoda::loadgen
