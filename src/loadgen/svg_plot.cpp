#include "loadgen/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"

namespace pagoda::loadgen {

namespace {

constexpr double kWidth = 880, kHeight = 480;
constexpr double kLeft = 80, kRight = 260, kTop = 50, kBottom = 60;  // margins, px
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out.push_back(c);
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  if (std::fabs(v) >= 1000 || v == std::floor(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

// Ticks at multiples of 1, 2 or 5 x 10^k, about `target` of them, covering [lo, hi].
std::vector<double> nice_ticks(double& lo, double& hi, int target, bool integer = false) {
  if (!(hi > lo)) hi = lo + 1;
  double raw = (hi - lo) / target;
  if (integer) raw = std::max(raw, 1.0);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (raw <= step) break;
  }
  lo = std::floor(lo / step) * step;
  hi = std::ceil(hi / step) * step;
  std::vector<double> ticks;
  for (double t = lo; t <= hi + step * 1e-9; t += step) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

}  // namespace

std::string line_chart_svg(const PlotSpec& spec) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const PlotSeries& s : spec.series) {
    for (const PlotPoint& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y);
      ymax = std::max(ymax, p.y);
      if (s.has_band && std::isfinite(p.band_lo) && std::isfinite(p.band_hi)) {
        ymin = std::min(ymin, p.band_lo);
        ymax = std::max(ymax, p.band_hi);
      }
    }
  }
  bool empty = !(xmax >= xmin);
  if (empty) {
    xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  }
  if (spec.y_from_zero) ymin = std::min(0.0, ymin);
  if (xmax == xmin) xmin -= 0.5, xmax += 0.5;
  std::vector<double> xt = nice_ticks(xmin, xmax, 8, spec.integer_x);
  std::vector<double> yt = nice_ticks(ymin, ymax, 6);
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto sx = [&](double x) { return kLeft + (x - xmin) / (xmax - xmin) * pw; };
  auto sy = [&](double y) { return kTop + ph - (y - ymin) / (ymax - ymin) * ph; };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" fill=\"white\"/>\n";
  o << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" << esc(spec.title)
    << "</text>\n";
  // Grid and ticks.
  o << "<g stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (double t : xt) o << "<line x1=\"" << num(sx(t)) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(sx(t)) << "\" y2=\"" << num(kTop + ph) << "\"/>\n";
  for (double t : yt) o << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(sy(t)) << "\" x2=\"" << num(kLeft + pw) << "\" y2=\"" << num(sy(t)) << "\"/>\n";
  o << "</g>\n";
  o << "<g fill=\"#333333\">\n";
  for (double t : xt) o << "<text x=\"" << num(sx(t)) << "\" y=\"" << num(kTop + ph + 18) << "\" text-anchor=\"middle\">" << tick_label(t) << "</text>\n";
  for (double t : yt) o << "<text x=\"" << num(kLeft - 8) << "\" y=\"" << num(sy(t) + 4) << "\" text-anchor=\"end\">" << tick_label(t) << "</text>\n";
  o << "</g>\n";
  o << "<rect x=\"" << num(kLeft) << "\" y=\"" << num(kTop) << "\" width=\"" << num(pw) << "\" height=\"" << num(ph)
    << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  o << "<text x=\"" << num(kLeft + pw / 2) << "\" y=\"" << num(kHeight - 16) << "\" text-anchor=\"middle\">"
    << esc(spec.x_label) << "</text>\n";
  o << "<text transform=\"translate(20," << num(kTop + ph / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
    << esc(spec.y_label) << "</text>\n";
  if (empty) {
    o << "<text x=\"" << num(kLeft + pw / 2) << "\" y=\"" << num(kTop + ph / 2) << "\" text-anchor=\"middle\" fill=\"#999999\">no data</text>\n";
  }
  // Series.
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const PlotSeries& s = spec.series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::vector<PlotPoint> pts;
    for (const PlotPoint& p : s.points) {
      if (std::isfinite(p.x) && std::isfinite(p.y)) pts.push_back(p);
    }
    if (s.has_band && !pts.empty()) {
      o << "<polygon fill=\"" << color << "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"";
      for (const PlotPoint& p : pts) o << num(sx(p.x)) << "," << num(sy(p.band_hi)) << " ";
      for (auto it = pts.rbegin(); it != pts.rend(); ++it) o << num(sx(it->x)) << "," << num(sy(it->band_lo)) << " ";
      o << "\"/>\n";
    }
    if (!pts.empty()) {
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
      for (const PlotPoint& p : pts) o << num(sx(p.x)) << "," << num(sy(p.y)) << " ";
      o << "\"/>\n";
    }
    if (s.markers) {
      for (const PlotPoint& p : pts) {
        o << "<circle cx=\"" << num(sx(p.x)) << "\" cy=\"" << num(sy(p.y)) << "\" r=\"3.5\" fill=\"" << color << "\"/>\n";
      }
    }
    double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    o << "<line x1=\"" << num(kLeft + pw + 14) << "\" y1=\"" << num(ly) << "\" x2=\"" << num(kLeft + pw + 38)
      << "\" y2=\"" << num(ly) << "\" stroke=\"" << color << "\" stroke-width=\"3\"/>\n";
    o << "<text x=\"" << num(kLeft + pw + 44) << "\" y=\"" << num(ly + 4) << "\">" << esc(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string results_plot_svg(const std::vector<const RunResults*>& runs) {
  PAGODA_CHECK(!runs.empty(), "a plot needs at least one run");
  auto name_of = [](const RunResults& r) { return r.config.label.empty() ? r.config.url : r.config.label; };
  std::string who;
  for (const RunResults* r : runs) who += (who.empty() ? "" : " vs ") + name_of(*r);
  const bool several = runs.size() > 1;
  PlotSpec spec;
  if (runs[0]->config.workload.kind == WorkloadKind::kMultiTurn) {
    for (const RunResults* run : runs) {
      std::map<int, std::vector<double>> by_turn;
      for (const RequestRecord& r : run->records) {
        if (r.ok() && r.ttft_ms >= 0) by_turn[r.turn_idx].push_back(r.ttft_ms);
      }
      PlotSeries s;
      s.name = (several ? name_of(*run) + ": " : std::string()) + "median, p10-p90 band";
      s.has_band = true;
      s.markers = true;
      for (auto& [turn, v] : by_turn) {
        Summary sum = summarize(v);
        s.points.push_back({static_cast<double>(turn + 1), sum.p50, sum.p10, sum.p90});
      }
      spec.series.push_back(std::move(s));
    }
    spec.title = "TTFT per turn, multi-turn: " + who;
    spec.x_label = "turn";
    spec.y_label = "time to first token (ms)";
    spec.integer_x = true;
    return line_chart_svg(spec);
  }
  auto cdf = [&](const RunResults& run, const std::string& name, auto value) {
    std::vector<double> v;
    for (const RequestRecord& r : run.records) {
      double x = value(r);
      if (r.ok() && x >= 0) v.push_back(x);
    }
    std::sort(v.begin(), v.end());
    PlotSeries s;
    s.name = (several ? name_of(run) + ": " : std::string()) + name;
    for (size_t i = 0; i < v.size(); ++i) {  // a step function: up at each sample
      double before = static_cast<double>(i) / static_cast<double>(v.size());
      double after = static_cast<double>(i + 1) / static_cast<double>(v.size());
      s.points.push_back({v[i], before, 0, 0});
      s.points.push_back({v[i], after, 0, 0});
    }
    return s;
  };
  spec.title = "Latency CDF, " + workload_name(runs[0]->config.workload.kind) + ": " + who;
  spec.x_label = "latency (ms)";
  spec.y_label = "fraction of requests";
  for (const RunResults* run : runs) {
    spec.series.push_back(cdf(*run, "TTFT", [](const RequestRecord& r) { return r.ttft_ms; }));
    spec.series.push_back(cdf(*run, "end-to-end", [](const RequestRecord& r) { return r.e2e_ms; }));
  }
  return line_chart_svg(spec);
}

void write_plot_file(const std::string& path, const std::vector<const RunResults*>& runs) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot open for writing");
  out << results_plot_svg(runs);
  if (!out) throw Error(path + ": write failed");
}

}  // namespace pagoda::loadgen
