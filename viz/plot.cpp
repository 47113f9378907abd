// viz/plot.cpp: gnuplot scripts for `ringzero plot` (see plot.h) and running gnuplot.
#include "viz/plot.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check.h"
#include "base/file.h"
#include "viz/gnuplot.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rz {
namespace {

// The tags of base/memory.h in stacking order, and one colour each (both panels agree).
const std::array<const char*, 8> kTags = {"params", "grads", "master", "adam_m", "adam_v", "comm", "activations",
                                          "workspace"};
const std::array<const char*, 8> kTagColours = {"#4c72b0", "#dd8452", "#55a868", "#c44e52",
                                                "#8172b3", "#937860", "#da8bc3", "#8c8c8c"};
const std::array<const char*, 8> kLineColours = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                 "#9467bd", "#8c564b", "#e377c2", "#17becf"};
// Validation loss of the run drawn in kLineColours[i]: a dark shade of the same hue, so the
// pair reads as one run, and dark enough to stand out on the (noisy) training line.
const std::array<const char*, 8> kValColours = {"#08306b", "#67000d", "#00441b", "#7f2704",
                                                "#3f007d", "#3b1e17", "#7a0177", "#014636"};

// An input file's text. Anything but a regular file (a FIFO would block forever, a
// directory reads as nothing) is refused first.
std::string read_text(const std::string& path, const char* what) {
  struct stat st {};
  RZ_CHECK(::stat(path.c_str(), &st) == 0, "%s: cannot read %s: %s", what, shown(path).c_str(), errno_string().c_str());
  RZ_CHECK(S_ISREG(st.st_mode), "%s: %s is not a regular file", what, shown(path).c_str());
  std::ifstream f(path, std::ios::binary);
  RZ_CHECK(f.good(), "%s: cannot read %s", what, shown(path).c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::string stem(const std::string& path) { return fs::path(path).stem().string(); }


std::string header(const std::string& out, const std::string& title, int w, int h) {
  std::string s = "# written by `ringzero plot`; run it again with: gnuplot THIS_FILE\n";
  if (plot_format(out) == "svg") {
    s += strfmt("set terminal svg size %d,%d dynamic font 'sans,12' noenhanced background '#ffffff'\n", w, h);
  } else {
    s += strfmt("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size %d,%d font 'sans,11' "
                "noenhanced } else { set terminal png size %d,%d noenhanced }\n",
                w, h, w, h);
  }
  s += "set output " + gp_string(output_name(out), "--out") + "\n";
  if (!title.empty()) s += "set title " + gp_string(title, "--title") + "\n";
  return s + "set grid\n";
}

// Checked reads of a JSON field: a missing field or a wrong type is one line naming the
// place (file:line or file and the object) and the field, never nlohmann's own text.
std::string kind_of(const json& v) {
  if (v.is_string()) return "the string " + shown(v.get<std::string>().substr(0, 40));
  if (v.is_number()) return "the number " + v.dump();
  return v.type_name();
}
const json& field(const json& j, const char* key, const std::string& where) {
  RZ_CHECK(j.is_object(), "%s: expected a JSON object, found %s", where.c_str(), kind_of(j).c_str());
  auto it = j.find(key);
  RZ_CHECK(it != j.end(), "%s: no \"%s\"", where.c_str(), key);
  return *it;
}
double number_at(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  RZ_CHECK(v.is_number(), "%s: \"%s\": expected a number, found %s", where.c_str(), key, kind_of(v).c_str());
  const double x = v.get<double>();
  RZ_CHECK(std::isfinite(x), "%s: \"%s\": expected a finite number, found %g", where.c_str(), key, x);
  return x;
}
// A byte count: a finite number in [0, 2^60].
double bytes_at(const json& j, const char* key, const std::string& where) {
  const double x = number_at(j, key, where);
  RZ_CHECK(x >= 0 && x <= std::ldexp(1.0, 60), "%s: \"%s\": expected a byte count in 0..2^60, found %g",
           where.c_str(), key, x);
  return x;
}
int int_at(const json& j, const char* key, const std::string& where, int lo, int hi) {
  const json& v = field(j, key, where);
  RZ_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
           "%s: \"%s\": expected an integer in %d..%d, found %s", where.c_str(), key, lo, hi, kind_of(v).c_str());
  return static_cast<int>(v.get<int64_t>());
}
// A string that is only compared, never drawn.
std::string string_at(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  RZ_CHECK(v.is_string(), "%s: \"%s\": expected a string, found %s", where.c_str(), key, kind_of(v).c_str());
  return v.get<std::string>();
}
// A string that will be drawn (so it goes into the script): check_text'ed here.
std::string text_at(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  RZ_CHECK(v.is_string(), "%s: \"%s\": expected a string, found %s", where.c_str(), key, kind_of(v).c_str());
  const std::string s = v.get<std::string>();
  check_text(s, strfmt("%s: \"%s\"", where.c_str(), key));
  return s;
}
// A map of tag -> bytes (bytes_by_tag, peak): the known tags, each a byte count.
std::array<double, 8> tag_bytes(const json& j, const char* key, const std::string& where) {
  const json& m = field(j, key, where);
  RZ_CHECK(m.is_object(), "%s: \"%s\": expected an object of bytes per tag, found %s", where.c_str(), key,
           kind_of(m).c_str());
  std::array<double, 8> out{};
  for (size_t t = 0; t < kTags.size(); ++t)
    if (m.contains(kTags[t])) out[t] = bytes_at(m, kTags[t], strfmt("%s: \"%s\"", where.c_str(), key));
  return out;
}
const json& array_at(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  RZ_CHECK(v.is_array(), "%s: \"%s\": expected an array, found %s", where.c_str(), key, kind_of(v).c_str());
  return v;
}

}  // namespace

std::string plot_format(const std::string& out_path) {
  RZ_CHECK(!out_path.empty(), "--out: give the picture's path (.png or .svg)");
  std::string ext = fs::path(out_path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  RZ_CHECK(ext == ".png" || ext == ".svg", "--out: %s: expected a .png or .svg file name", out_path.c_str());
  return ext.substr(1);
}

std::string loss_plot_script(const LossPlotArgs& a) {
  RZ_CHECK(!a.metrics.empty(), "--metrics: give at least one JSONL file written by train --metrics");
  RZ_CHECK(a.labels.empty() || a.labels.size() == a.metrics.size(),
           "--label: %zu labels for %zu --metrics files (give one per file or none)", a.labels.size(), a.metrics.size());
  RZ_CHECK(a.x == "step" || a.x == "tokens", "--x: expected step or tokens, found '%s'", a.x.c_str());
  RZ_CHECK(a.smooth >= 1 && a.smooth <= 100000, "--smooth: expected 1..100000 steps, found %d", a.smooth);
  std::string data, plots, val_plots;
  for (size_t f = 0; f < a.metrics.size(); ++f) {
    const std::string& path = a.metrics[f];
    const auto lines = lines_of(read_text(path, "--metrics"));
    std::string train, val;
    size_t points = 0;
    std::vector<double> recent;  // the last a.smooth losses (--smooth)
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = strfmt("%s:%zu", escaped(path).c_str(), i + 1);
      json j = json::parse(lines[i], nullptr, false);
      RZ_CHECK(!j.is_discarded() && j.is_object(), "%s: not a JSON object", where.c_str());
      if (a.x == "tokens")
        RZ_CHECK(j.contains("tokens"), "%s: no \"tokens\" (written by an older ringzero?); plot with --x step",
                 where.c_str());
      const double x = number_at(j, a.x.c_str(), where);
      // null: a skipped (non-finite) step
      if (!field(j, "loss", where).is_null()) {
        recent.push_back(number_at(j, "loss", where));
        if (recent.size() > static_cast<size_t>(a.smooth)) recent.erase(recent.begin());
        double mean = 0;
        for (double v : recent) mean += v;
        train += strfmt("%.17g %.9g\n", x, mean / static_cast<double>(recent.size()));
        ++points;
      }
      if (j.contains("val_loss") && !j["val_loss"].is_null())
        val += strfmt("%.17g %.9g\n", x, number_at(j, "val_loss", where));
    }
    RZ_CHECK(points > 0, "--metrics: %s has no step with a finite loss", shown(path).c_str());
    const std::string label = a.labels.empty() ? stem(path) : a.labels[f];
    const std::string label_what =
        a.labels.empty() ? strfmt("--metrics: the file name %s (the default label; give --label)", shown(path).c_str())
                         : std::string("--label");
    const char* colour = kLineColours[f % kLineColours.size()];
    data += strfmt("$train%zu << EOD\n%sEOD\n", f, train.c_str());
    const std::string what = a.smooth > 1 ? strfmt(" loss (mean of %d steps)", a.smooth) : std::string(" loss");
    plots += strfmt("%s$train%zu using 1:2 with lines lw 2 lc rgb '%s' title %s", plots.empty() ? "" : ", ", f, colour,
                    gp_string(label + what, label_what).c_str());
    if (!val.empty()) {
      // Its own colour, filled circles in a white ring, drawn after every training line:
      // the points at each eval stay visible on top of the training curve.
      data += strfmt("$val%zu << EOD\n%sEOD\n", f, val.c_str());
      const char* val_colour = kValColours[f % kValColours.size()];
      val_plots += strfmt(", $val%zu using 1:2 with linespoints dt 2 lw 2 pt 7 ps 1.8 lc rgb '%s' title %s", f,
                          val_colour, gp_string(label + " val loss", label_what).c_str());
      val_plots += strfmt(", $val%zu using 1:2 with points pt 6 ps 1.8 lw 1.5 lc rgb 'white' notitle", f);
    }
  }
  plots += val_plots;
  std::string s = header(a.out, a.title.empty() ? "training and validation loss" : a.title, 1000, 600);
  s += data;
  s += "set xlabel " + gp_string(a.x == "tokens" ? "tokens seen (all ranks)" : "optimizer step", "--x") + "\n";
  s += "set ylabel 'loss (nats per token)'\nset key top right\n";
  if (a.x == "tokens") s += "set format x '%.1s%c'\n";
  return s + "plot " + plots + "\n";
}

namespace {

struct Bar {
  std::string label;
  std::array<double, 8> bytes{};
};
struct Group {
  std::string title;
  std::vector<Bar> bars;
};

std::vector<Group> estimate_groups(const std::vector<std::string>& files) {
  std::vector<Group> groups;
  for (const std::string& path : files) {
    json j = json::parse(read_text(path, "--estimate"), nullptr, false);
    RZ_CHECK(!j.is_discarded() && j.is_object() && j.contains("rows"),
             "--estimate: %s is not the output of `ringzero memory --json`", shown(path).c_str());
    const json& rows = array_at(j, "rows", "--estimate: " + escaped(path));
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string where = strfmt("--estimate: %s: rows[%zu]", escaped(path).c_str(), i);
      const json& row = rows[i];
      RZ_CHECK(row.is_object() && row.contains("bytes_by_tag") && row.contains("strategy") && row.contains("nranks"),
               "%s: a row without strategy, nranks or bytes_by_tag (written by an older ringzero?)", where.c_str());
      const std::string strategy = text_at(row, "strategy", where);
      auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.title == strategy; });
      if (g == groups.end()) {
        groups.push_back(Group{strategy, {}});
        g = groups.end() - 1;
      }
      g->bars.push_back(Bar{strfmt("N=%d", int_at(row, "nranks", where, 1, 1 << 20)), tag_bytes(row, "bytes_by_tag", where)});
    }
  }
  return groups;
}

std::vector<Group> measured_groups(const std::vector<std::string>& files) {
  std::vector<Group> groups;
  for (const std::string& path : files) {
    json j = json::parse(read_text(path, "--measured"), nullptr, false);
    RZ_CHECK(!j.is_discarded() && j.is_object() && j.contains("ranks") && j.contains("strategy") &&
                 j.contains("nranks"),
             "--measured: %s is not a train --memory-report file", shown(path).c_str());
    const std::string where = "--measured: " + escaped(path);
    Group g{strfmt("%s N=%d", text_at(j, "strategy", where).c_str(), int_at(j, "nranks", where, 1, 1 << 20)), {}};
    const json& ranks = array_at(j, "ranks", where);
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string rwhere = strfmt("%s: ranks[%zu]", where.c_str(), i);
      RZ_CHECK(ranks[i].is_object() && ranks[i].contains("peak") && ranks[i].contains("rank"),
               "%s: a rank without peak bytes", rwhere.c_str());
      g.bars.push_back(Bar{strfmt("rank %d", int_at(ranks[i], "rank", rwhere, 0, 1 << 20)),
                           tag_bytes(ranks[i], "peak", rwhere)});
    }
    groups.push_back(g);
  }
  return groups;
}

// One rowstacked histogram panel: a data block per group, a newhistogram per group.
std::string histogram_panel(const std::vector<Group>& groups, const std::string& name, const std::string& title,
                            double unit, const char* unit_name, bool key) {
  std::string s, plot;
  for (size_t g = 0; g < groups.size(); ++g) {
    s += strfmt("$%s%zu << EOD\n", name.c_str(), g);
    for (const Bar& b : groups[g].bars) {
      s += "\"" + b.label + "\"";
      for (double x : b.bytes) s += strfmt("\t%.6g", x / unit);
      s += "\n";
    }
    s += "EOD\n";
    plot += strfmt("%snewhistogram %s lt 1", g ? ", " : "", gp_string(groups[g].title, "strategy").c_str());
    for (size_t t = 0; t < kTags.size(); ++t) {
      plot += strfmt(", $%s%zu using %zu%s lc rgb '%s' %s", name.c_str(), g, t + 2, t == 0 ? ":xtic(1)" : "",
                     kTagColours[t], g == 0 && key ? ("title " + gp_string(kTags[t], "tag")).c_str() : "notitle");
    }
  }
  s += "set title " + gp_string(title, "--title") + "\n";
  s += strfmt("set ylabel '%s per rank'\n", unit_name);
  s += key ? "set key outside right top vertical title 'tag' reverse Left\n" : "unset key\n";
  return s + "plot " + plot + "\n";
}

}  // namespace

std::string memory_plot_script(const MemoryPlotArgs& a) {
  RZ_CHECK(!a.estimates.empty() || !a.measured.empty(),
           "plot memory: give --estimate (ringzero memory --json) and/or --measured (train --memory-report) files");
  const std::vector<Group> est = estimate_groups(a.estimates), meas = measured_groups(a.measured);
  double top = 0;
  for (const auto* gs : {&est, &meas})
    for (const Group& g : *gs)
      for (const Bar& b : g.bars) {
        double t = 0;
        for (double x : b.bytes) t += x;
        top = std::max(top, t);
      }
  const bool gib = top >= double(1ull << 30);
  const double unit = gib ? double(1ull << 30) : double(1ull << 20);
  const char* unit_name = gib ? "GiB" : "MiB";
  const bool both = !est.empty() && !meas.empty();
  std::string s = header(a.out, "", both ? 1500 : 1000, 620);
  s += "set datafile separator '\\t'\nset style data histograms\nset style histogram rowstacked gap 1\n"
       "set style fill solid 0.9 border rgb '#333333'\nset boxwidth 0.75\nset xtics norotate nomirror\nset bmargin 5\n"
       "set grid ytics\nunset xlabel\n";
  s += strfmt("set yrange [0:%.6g]\n", top / unit * 1.08);  // one scale for both panels
  if (both) s += "set multiplot title " + gp_string(a.title.empty() ? "bytes per rank by tag" : a.title, "--title") + "\n";
  // Side by side: the estimates (many bars) get the wider panel, the measured one the key.
  if (both) s += "set origin 0,0\nset size 0.56,0.94\n";
  if (!est.empty())
    s += histogram_panel(est, "est", both || a.title.empty() ? "estimate: ringzero memory --json" : a.title, unit,
                         unit_name, meas.empty());
  if (both) s += "set origin 0.56,0\nset size 0.44,0.94\n";
  if (!meas.empty())
    s += histogram_panel(meas, "meas", both || a.title.empty() ? "measured: peak per tag (train --memory-report)" : a.title,
                         unit, unit_name, true);
  if (both) s += "unset multiplot\n";
  return s;
}

std::string comm_plot_script(const CommPlotArgs& a) {
  RZ_CHECK(!a.results.empty(), "--results: give at least one comm-bench output file");
  RZ_CHECK(a.labels.empty() || a.labels.size() == a.results.size(),
           "--label: %zu labels for %zu result files (give one per file or none)", a.labels.size(), a.results.size());
  std::string data, plots;
  double lo = 0, hi = 0;  // message sizes seen
  for (size_t f = 0; f < a.results.size(); ++f) {
    const std::string& path = a.results[f];
    const auto lines = lines_of(read_text(path, "--results"));
    std::string rows, label;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& l = lines[i];
      const size_t first = l.find_first_not_of(" \t\r");
      if (first == std::string::npos || l[first] == '#') continue;
      const std::string where = strfmt("%s:%zu", escaped(path).c_str(), i + 1);
      double bytes = 0, busbw = 0;
      if (l[first] == '{') {  // comm-bench --json
        json j = json::parse(l, nullptr, false);
        RZ_CHECK(!j.is_discarded() && j.is_object(), "%s: not a JSON object", where.c_str());
        bytes = number_at(j, "bytes", where);
        busbw = number_at(j, "busbw_gbps", where);
        if (label.empty() && j.contains("op"))  // the default label: op, transport and N of the first line
          label = strfmt("%s %s N=%d", text_at(j, "op", where).c_str(),
                         j.contains("transport") ? text_at(j, "transport", where).c_str() : "?",
                         j.contains("nranks") ? int_at(j, "nranks", where, 1, 1 << 20) : 0);
      } else {  // a table: comm-bench's (8 columns) or bench/'s MPI and Gloo programs (6)
        std::vector<std::string> col;
        std::stringstream ss(l);
        for (std::string c; ss >> c;) col.push_back(c);
        const size_t busbw_col = col.size() == 8 ? 6 : col.size() == 6 ? 4 : 0;
        char* e1 = nullptr;
        char* e2 = nullptr;
        if (busbw_col > 0) {
          bytes = std::strtod(col[0].c_str(), &e1);
          busbw = std::strtod(col[busbw_col].c_str(), &e2);
        }
        RZ_CHECK(busbw_col > 0 && *e1 == 0 && *e2 == 0,
                 "%s: expected a comm-bench result (a --json line or a table row: size count [type redop] time algbw "
                 "busbw #wrong)",
                 where.c_str());
      }
      // Sizes of 1 byte to 2^60 keep the power-of-two tics below in range.
      RZ_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes <= std::ldexp(1.0, 60) && std::isfinite(busbw) && busbw >= 0,
               "%s: expected a size of 1 byte to 2^60 and a finite busbw >= 0, found %g and %g", where.c_str(), bytes,
               busbw);
      rows += strfmt("%.17g %.9g\n", bytes, busbw);
      lo = lo == 0 ? bytes : std::min(lo, bytes);
      hi = std::max(hi, bytes);
    }
    RZ_CHECK(!rows.empty(), "--results: %s holds no result rows", shown(path).c_str());
    std::string label_what = strfmt("--results: %s: \"op\", \"transport\"", escaped(path).c_str());
    if (!a.labels.empty()) {
      label = a.labels[f];
      label_what = "--label";
    }
    if (label.empty()) {
      label = stem(path);
      label_what = strfmt("--results: the file name %s (the default label; give --label)", shown(path).c_str());
    }
    data += strfmt("$bench%zu << EOD\n%sEOD\n", f, rows.c_str());
    plots += strfmt("%s$bench%zu using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title %s", plots.empty() ? "" : ", ",
                    f, kLineColours[f % kLineColours.size()], gp_string(label, label_what).c_str());
  }
  std::string s = header(a.out, a.title.empty() ? "bus bandwidth (nccl-tests busbw)" : a.title, 1000, 600);
  s += data;
  // Tics at powers of two (every second or fourth one on wide ranges), labelled 1K, 4M, ...
  std::string tics;
  const int first = static_cast<int>(std::floor(std::log2(lo))), last = static_cast<int>(std::ceil(std::log2(hi)));
  const int stride = last - first > 24 ? 4 : last - first > 12 ? 2 : 1;
  for (int e = first; e <= last; e += stride) {
    const char* unit = e >= 30 ? "G" : e >= 20 ? "M" : e >= 10 ? "K" : "";
    const int shift = e >= 30 ? 30 : e >= 20 ? 20 : e >= 10 ? 10 : 0;
    tics += strfmt("%s'%llu%s' %.17g", tics.empty() ? "" : ", ", 1ull << (e - shift), unit, std::ldexp(1.0, e));
  }
  s += "set xtics (" + tics + ")\n";
  s += strfmt("set xrange [%.17g:%.17g]\n", lo / 1.25, hi * 1.25);
  s += "set logscale x 2\nset xlabel 'message size (bytes; K, M, G = 2^10, 2^20, 2^30)'\n"
       "set ylabel 'busbw (GB/s)'\nset key top left\nset yrange [0:*]\n";
  return s + "plot " + plots + "\n";
}

std::string precision_plot_script(const PrecisionPlotArgs& a) {
  const auto lines = lines_of(read_text(a.results, "--results"));
  struct Point {
    int n;
    double rs_bf16, ar_bf16, rs_fp32, one;
  };
  std::vector<Point> pts;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos || lines[i][lines[i].find_first_not_of(" \t\r")] == '#')
      continue;
    const std::string where = strfmt("%s:%zu", escaped(a.results).c_str(), i + 1);
    json j = json::parse(lines[i], nullptr, false);
    RZ_CHECK(!j.is_discarded() && j.is_object() && j.contains("check") && j["check"] == "precision",
             "%s: expected a line of comm-bench --check-precision --json", where.c_str());
    Point p{int_at(j, "nranks", where, 2, 1 << 20), number_at(j, "rs_bf16", where), number_at(j, "ar_bf16", where),
            number_at(j, "rs_fp32", where), number_at(j, "fp32_to_bf16", where)};
    for (double e : {p.rs_bf16, p.ar_bf16, p.rs_fp32, p.one})
      RZ_CHECK(e >= 0 && e <= 1e6, "%s: expected relative errors in 0..1e6, found %g", where.c_str(), e);
    pts.push_back(p);
  }
  RZ_CHECK(!pts.empty(), "--results: %s holds no --check-precision lines", shown(a.results).c_str());
  std::sort(pts.begin(), pts.end(), [](const Point& x, const Point& y) { return x.n < y.n; });
  // Zero errors have no place on a log axis: they sit at the floor, 1e-16.
  auto y = [](double e) { return std::max(e, 1e-16); };
  std::string rows, tics;
  for (const Point& p : pts) {
    // The sqrt(N) reference goes through the first bf16 point.
    const double ref = pts[0].rs_bf16 * std::sqrt(double(p.n) / pts[0].n);
    rows += strfmt("%d %.9g %.9g %.9g %.9g %.9g\n", p.n, y(p.rs_bf16), y(p.ar_bf16), y(p.rs_fp32), y(p.one), y(ref));
    tics += strfmt("%s'%d' %d", tics.empty() ? "" : ", ", p.n, p.n);
  }
  std::string s = header(a.out, a.title.empty() ? "ring reduction error against N (real bf16 gradients)" : a.title,
                         1000, 600);
  s += "$prec << EOD\n" + rows + "EOD\n";
  s += "set logscale xy\nset xtics (" + tics + ")\n";
  s += strfmt("set xrange [%g:%g]\n", pts.front().n / 1.3, pts.back().n * 1.3);
  s += "set format y '1e%T'\nset xlabel 'ranks N'\n"
       "set ylabel 'relative L2 error of the mean gradient (vs fp64)'\nset key right center\n";
  s += "plot $prec using 1:2 with linespoints lw 2 pt 7 lc rgb '#d62728' title 'bf16 partial sums: ReduceScatter', "
       "$prec using 1:3 with points pt 6 ps 2 lc rgb '#ff7f0e' title 'bf16 partial sums: AllReduce', "
       "$prec using 1:5 with linespoints lw 2 pt 5 lc rgb '#2ca02c' title 'fp32 partial sums, rounded to bf16 once', "
       "$prec using 1:4 with linespoints lw 2 pt 9 lc rgb '#1f77b4' title 'fp32 partial sums (fp32 result)', "
       "$prec using 1:6 with lines dt 2 lw 1 lc rgb '#7f7f7f' title 'sqrt(N), through the first bf16 point'\n";
  return s;
}

void run_gnuplot(const std::string& script, const std::string& out_path) {
  std::string gnuplot;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');) {
      const std::string cand = (dir.empty() ? std::string(".") : dir) + "/gnuplot";
      if (::access(cand.c_str(), X_OK) == 0) {
        gnuplot = cand;
        break;
      }
    }
  }
  RZ_CHECK(!gnuplot.empty(),
           "plot: gnuplot not found on PATH (install Debian's gnuplot-nox: apt-get install gnuplot-nox, or run "
           "scripts/install-deps.sh)");
  const fs::path parent = fs::path(out_path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const std::string script_path = out_path + ".gp";
  write_file_atomic(script_path, script);
  std::error_code ec;
  fs::remove(out_path, ec);
  std::string said;
  const int st = gnuplot_process(gnuplot, script, said);
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  for (char& c : said)  // one line, and nothing a terminal would act on
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  RZ_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "plot: gnuplot failed on %s (%s): %s", script_path.c_str(),
           WIFEXITED(st) ? strfmt("exit status %d", WEXITSTATUS(st)).c_str() : strsignal(WTERMSIG(st)), said.c_str());
  struct stat sb {};
  RZ_CHECK(::stat(out_path.c_str(), &sb) == 0 && sb.st_size > 0, "plot: gnuplot wrote no picture to %s%s%s",
           out_path.c_str(), said.empty() ? "" : ": ", said.c_str());
}

}  // namespace rz

namespace rz {

std::string trace_plot_script(const TracePlotArgs& a) {
  json t = json::parse(read_text(a.trace, "--trace"), nullptr, false);
  RZ_CHECK(!t.is_discarded() && t.is_object() && t.contains("traceEvents"),
           "--trace: %s is not a Chrome trace-event file (train --trace)", shown(a.trace).c_str());
  const json& events = array_at(t, "traceEvents", "--trace: " + escaped(a.trace));
  // Kinds of span drawn, in legend order: (name prefix, track, colour, legend).
  struct Kind {
    const char* prefix;
    int tid;
    const char* colour;
    const char* legend;
    std::string rows;
  };
  std::vector<Kind> kinds = {{"forward layer", 1, "#4c72b0", "forward (per layer)", {}},
                             {"backward layer", 1, "#dd8452", "backward (per layer)", {}},
                             {"wait for gradient", 1, "#c44e52", "blocked on gradient comm", {}},
                             {"optimizer", 1, "#55a868", "optimizer step", {}},
                             {"data", 1, "#8c8c8c", "data / eval / checkpoint", {}},
                             {"all_reduce", 2, "#8172b3", "AllReduce", {}},
                             {"reduce_scatter", 2, "#937860", "ReduceScatter", {}},
                             {"all_gather", 2, "#17becf", "AllGather", {}},
                             {"", 2, "#bbbbbb", "other collectives", {}}};
  // The fields drawn, read and checked once: (ph, name) are only compared, never drawn.
  struct Event {
    std::string ph, name;
    int pid = 0, tid = 1;
    bool has_ts = false;
    double ts = 0, dur = -1, value = 0;  // ms; dur < 0: none
  };
  std::vector<Event> evs;
  int nranks = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const std::string where = strfmt("--trace: %s: traceEvents[%zu]", escaped(a.trace).c_str(), i);
    const json& e = events[i];
    RZ_CHECK(e.is_object(), "%s: expected a JSON object, found %s", where.c_str(), kind_of(e).c_str());
    if (!e.contains("ph")) continue;
    Event ev;
    ev.ph = string_at(e, "ph", where);
    ev.pid = int_at(e, "pid", where, 0, 1023);  // a rank
    if (e.contains("name")) ev.name = string_at(e, "name", where);
    if (e.contains("tid")) ev.tid = int_at(e, "tid", where, 0, 1 << 30);
    ev.has_ts = e.contains("ts");
    if (ev.has_ts) ev.ts = number_at(e, "ts", where) / 1e3;
    if (ev.ph == "X" && e.contains("dur")) ev.dur = number_at(e, "dur", where) / 1e3;
    RZ_CHECK(ev.ph != "X" || !e.contains("dur") || ev.dur >= 0, "%s: \"dur\": expected a duration >= 0, found %g",
             where.c_str(), ev.dur * 1e3);
    if (ev.ph == "C" && e.contains("args") && field(e, "args", where).contains("value"))
      ev.value = number_at(e["args"], "value", where + ": \"args\"");
    nranks = std::max(nranks, ev.pid + 1);
    evs.push_back(std::move(ev));
  }
  RZ_CHECK(nranks > 0, "--trace: %s has no rank rows", shown(a.trace).c_str());
  double t_end = 0;
  std::string labels;
  auto row_y = [&](int rank, int tid) { return 2.0 * (nranks - 1 - rank) + (tid == 1 ? 1.0 : 0.4); };
  for (const Event& e : evs) {
    if (!e.has_ts) continue;
    if (e.ph == "C" && e.pid == 0) {
      labels += strfmt("set label 'overlap %.0f%%' at %.6g, %.6g left font ',9' tc rgb '#444444'\n", e.value, e.ts,
                       2.0 * nranks - 0.35);
      labels += strfmt("set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '#999999'\n", e.ts, e.ts);
      continue;
    }
    if (e.ph != "X" || e.dur < 0) continue;
    t_end = std::max(t_end, e.ts + e.dur);
    for (Kind& k : kinds) {
      const bool match = k.tid == e.tid && (std::string(k.prefix).empty() || e.name.rfind(k.prefix, 0) == 0 ||
                                            (std::string(k.prefix) == "data" && (e.name == "eval" || e.name == "checkpoint")));
      if (!match) continue;
      k.rows += strfmt("%.6g %.6g %.6g %.6g\n", e.ts + e.dur / 2, row_y(e.pid, e.tid), e.dur / 2, e.tid == 1 ? 0.3 : 0.25);
      break;
    }
  }
  std::string s = header(a.out, a.title.empty() ? "timeline (train --trace): compute and comm per rank" : a.title,
                         1400, 200 + 110 * nranks);
  std::string plots;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i].rows.empty()) continue;
    s += strfmt("$k%zu << EOD\n%sEOD\n", i, kinds[i].rows.c_str());
    plots += strfmt("%s$k%zu using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '%s' title %s",
                    plots.empty() ? "" : ", ", i, kinds[i].colour, gp_string(kinds[i].legend, "legend").c_str());
  }
  RZ_CHECK(!plots.empty(), "--trace: %s holds no spans", shown(a.trace).c_str());
  std::string tics;
  for (int r = 0; r < nranks; ++r)
    tics += strfmt("%s'rank %d compute' %.6g, 'rank %d comm' %.6g", r ? ", " : "", r, row_y(r, 1), r, row_y(r, 2));
  s += "set ytics (" + tics + ")\n";
  s += strfmt("set yrange [-0.2:%.6g]\nset xrange [0:%.6g]\n", 2.0 * nranks, t_end * 1.01);
  s += "set xlabel 'ms since the ranks left the alignment barrier'\nset grid noytics xtics\n"
       "set key outside bottom center horizontal\n";
  return s + labels + "plot " + plots + "\n";
}

}  // namespace rz
