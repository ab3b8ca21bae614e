// A hand-written SVG line chart (no plotting dependency): axes with "nice"
// ticks, one polyline per series, an optional shaded band per series, a legend.
// The output is a standalone, well-formed SVG 1.1 document that browsers render.
//
// Pure functions; thread-safe. Non-finite points are dropped.
#pragma once

#include <string>
#include <vector>

#include "loadgen/results.h"

namespace pagoda::loadgen {

struct PlotPoint {
  double x = 0, y = 0;
  double band_lo = 0, band_hi = 0;  // used when the series has_band
};

struct PlotSeries {
  std::string name;
  std::vector<PlotPoint> points;  // drawn in order
  bool has_band = false;          // shade band_lo..band_hi along the line
  bool markers = false;           // a dot at each point
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool y_from_zero = true;
  bool integer_x = false;  // x ticks at whole numbers only (turns)
};

std::string line_chart_svg(const PlotSpec& spec);

// The chart for one run or several on one set of axes (--compare): multi-turn:
// TTFT per turn (median, p10-p90 band) per run; otherwise the empirical CDFs of
// TTFT and e2e latency of ok requests, per run. Runs are named by label (else
// URL). The kind of chart follows the first run's workload.
// Requires: at least one run.
std::string results_plot_svg(const std::vector<const RunResults*>& runs);
inline std::string results_plot_svg(const RunResults& results) { return results_plot_svg({&results}); }

// Writes results_plot_svg() to `path`; throws pagoda::Error on I/O failure.
void write_plot_file(const std::string& path, const std::vector<const RunResults*>& runs);
inline void write_plot_file(const std::string& path, const RunResults& results) {
  write_plot_file(path, std::vector<const RunResults*>{&results});
}

}  // namespace pagoda::loadgen
