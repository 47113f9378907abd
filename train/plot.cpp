// train/plot.cpp: gnuplot scripts for `ringzero plot` (see plot.h) and running gnuplot.
#include "train/plot.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check.h"
#include "base/file.h"

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

// A gnuplot single-quoted string: '' stands for '.
std::string gp_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string read_text(const std::string& path, const char* what) {
  std::ifstream f(path);
  RZ_CHECK(f.good(), "%s: cannot read %s", what, path.c_str());
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
  s += "set output " + gp_string(out) + "\n";
  if (!title.empty()) s += "set title " + gp_string(title) + "\n";
  return s + "set grid\n";
}

double number_at(const json& j, const char* key, const std::string& where) {
  RZ_CHECK(j.contains(key), "%s: no \"%s\"", where.c_str(), key);
  RZ_CHECK(j[key].is_number(), "%s: \"%s\" is not a number", where.c_str(), key);
  return j[key].get<double>();
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
  std::string data, plots;
  for (size_t f = 0; f < a.metrics.size(); ++f) {
    const std::string& path = a.metrics[f];
    const auto lines = lines_of(read_text(path, "--metrics"));
    std::string train, val;
    size_t points = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = strfmt("%s:%zu", path.c_str(), i + 1);
      json j = json::parse(lines[i], nullptr, false);
      RZ_CHECK(!j.is_discarded() && j.is_object(), "%s: not a JSON object", where.c_str());
      if (a.x == "tokens")
        RZ_CHECK(j.contains("tokens"), "%s: no \"tokens\" (written by an older ringzero?); plot with --x step",
                 where.c_str());
      const double x = number_at(j, a.x.c_str(), where);
      RZ_CHECK(j.contains("loss"), "%s: no \"loss\"", where.c_str());
      if (j["loss"].is_number()) {  // null: a skipped (non-finite) step
        train += strfmt("%.17g %.9g\n", x, j["loss"].get<double>());
        ++points;
      }
      if (j.contains("val_loss") && j["val_loss"].is_number())
        val += strfmt("%.17g %.9g\n", x, j["val_loss"].get<double>());
    }
    RZ_CHECK(points > 0, "--metrics: %s has no step with a finite loss", path.c_str());
    const std::string label = a.labels.empty() ? stem(path) : a.labels[f];
    const char* colour = kLineColours[f % kLineColours.size()];
    data += strfmt("$train%zu << EOD\n%sEOD\n", f, train.c_str());
    plots += strfmt("%s$train%zu using 1:2 with lines lw 2 lc rgb '%s' title %s", plots.empty() ? "" : ", ", f, colour,
                    gp_string(label + " loss").c_str());
    if (!val.empty()) {
      data += strfmt("$val%zu << EOD\n%sEOD\n", f, val.c_str());
      plots += strfmt(", $val%zu using 1:2 with linespoints dt 2 lw 2 pt 7 ps 1.2 lc rgb '%s' title %s", f, colour,
                      gp_string(label + " val loss").c_str());
    }
  }
  std::string s = header(a.out, a.title.empty() ? "training and validation loss" : a.title, 1000, 600);
  s += data;
  s += "set xlabel " + gp_string(a.x == "tokens" ? "tokens seen (all ranks)" : "optimizer step") + "\n";
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
    RZ_CHECK(!j.is_discarded() && j.contains("rows") && j["rows"].is_array(),
             "--estimate: %s is not the output of `ringzero memory --json`", path.c_str());
    for (const json& row : j["rows"]) {
      RZ_CHECK(row.contains("bytes_by_tag") && row.contains("strategy") && row.contains("nranks"),
               "--estimate: %s: a row without strategy, nranks or bytes_by_tag (written by an older ringzero?)",
               path.c_str());
      const std::string strategy = row["strategy"].get<std::string>();
      auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.title == strategy; });
      if (g == groups.end()) {
        groups.push_back(Group{strategy, {}});
        g = groups.end() - 1;
      }
      Bar b{strfmt("N=%d", row["nranks"].get<int>()), {}};
      for (size_t t = 0; t < kTags.size(); ++t)
        if (row["bytes_by_tag"].contains(kTags[t])) b.bytes[t] = row["bytes_by_tag"][kTags[t]].get<double>();
      g->bars.push_back(b);
    }
  }
  return groups;
}

std::vector<Group> measured_groups(const std::vector<std::string>& files) {
  std::vector<Group> groups;
  for (const std::string& path : files) {
    json j = json::parse(read_text(path, "--measured"), nullptr, false);
    RZ_CHECK(!j.is_discarded() && j.contains("ranks") && j.contains("strategy") && j.contains("nranks"),
             "--measured: %s is not a train --memory-report file", path.c_str());
    Group g{strfmt("%s N=%d", j["strategy"].get<std::string>().c_str(), j["nranks"].get<int>()), {}};
    for (const json& r : j["ranks"]) {
      RZ_CHECK(r.contains("peak") && r.contains("rank"), "--measured: %s: a rank without peak bytes", path.c_str());
      Bar b{strfmt("rank %d", r["rank"].get<int>()), {}};
      for (size_t t = 0; t < kTags.size(); ++t)
        if (r["peak"].contains(kTags[t])) b.bytes[t] = r["peak"][kTags[t]].get<double>();
      g.bars.push_back(b);
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
    plot += strfmt("%snewhistogram %s lt 1", g ? ", " : "", gp_string(groups[g].title).c_str());
    for (size_t t = 0; t < kTags.size(); ++t) {
      plot += strfmt(", $%s%zu using %zu%s lc rgb '%s' %s", name.c_str(), g, t + 2, t == 0 ? ":xtic(1)" : "",
                     kTagColours[t], g == 0 && key ? ("title " + gp_string(kTags[t])).c_str() : "notitle");
    }
  }
  s += "set title " + gp_string(title) + "\n";
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
  if (both) s += "set multiplot title " + gp_string(a.title.empty() ? "bytes per rank by tag" : a.title) + "\n";
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
      const std::string where = strfmt("%s:%zu", path.c_str(), i + 1);
      double bytes = 0, busbw = 0;
      if (l[first] == '{') {  // comm-bench --json
        json j = json::parse(l, nullptr, false);
        RZ_CHECK(!j.is_discarded(), "%s: not a JSON object", where.c_str());
        bytes = number_at(j, "bytes", where);
        busbw = number_at(j, "busbw_gbps", where);
        if (label.empty() && j.contains("op"))
          label = strfmt("%s %s N=%d", j["op"].get<std::string>().c_str(),
                         j.value("transport", std::string("?")).c_str(), j.value("nranks", 0));
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
      RZ_CHECK(bytes > 0 && std::isfinite(busbw), "%s: size must be positive and busbw finite", where.c_str());
      rows += strfmt("%.17g %.9g\n", bytes, busbw);
      lo = lo == 0 ? bytes : std::min(lo, bytes);
      hi = std::max(hi, bytes);
    }
    RZ_CHECK(!rows.empty(), "--results: %s holds no result rows", path.c_str());
    if (!a.labels.empty()) label = a.labels[f];
    if (label.empty()) label = stem(path);
    data += strfmt("$bench%zu << EOD\n%sEOD\n", f, rows.c_str());
    plots += strfmt("%s$bench%zu using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title %s", plots.empty() ? "" : ", ",
                    f, kLineColours[f % kLineColours.size()], gp_string(label).c_str());
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
  auto shell_quoted = [](const std::string& x) {
    std::string q = "'";
    for (char c : x) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd = shell_quoted(gnuplot) + " " + shell_quoted(script_path) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  RZ_CHECK(p != nullptr, "plot: cannot start %s: %s", gnuplot.c_str(), errno_string().c_str());
  std::string said;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) said += buf;
  const int st = ::pclose(p);
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  for (char& c : said)
    if (c == '\n') c = ' ';
  RZ_CHECK(st == 0, "plot: gnuplot failed on %s: %s", script_path.c_str(), said.c_str());
  struct stat sb {};
  RZ_CHECK(::stat(out_path.c_str(), &sb) == 0 && sb.st_size > 0, "plot: gnuplot wrote no picture to %s%s%s",
           out_path.c_str(), said.empty() ? "" : ": ", said.c_str());
}

}  // namespace rz

namespace rz {

std::string trace_plot_script(const TracePlotArgs& a) {
  json t = json::parse(read_text(a.trace, "--trace"), nullptr, false);
  RZ_CHECK(!t.is_discarded() && t.contains("traceEvents") && t["traceEvents"].is_array(),
           "--trace: %s is not a Chrome trace-event file (train --trace)", a.trace.c_str());
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
  int nranks = 0;
  double t_end = 0;
  std::string labels;
  for (const json& e : t["traceEvents"]) {
    if (!e.contains("ph") || !e.contains("pid")) continue;
    nranks = std::max(nranks, e["pid"].get<int>() + 1);
  }
  RZ_CHECK(nranks > 0 && nranks <= 1024, "--trace: %s has no rank rows", a.trace.c_str());
  auto row_y = [&](int rank, int tid) { return 2.0 * (nranks - 1 - rank) + (tid == 1 ? 1.0 : 0.4); };
  for (const json& e : t["traceEvents"]) {
    if (!e.contains("ph") || !e.contains("ts") || !e["ts"].is_number()) continue;
    const std::string ph = e["ph"].get<std::string>(), name = e.value("name", std::string());
    const int pid = e["pid"].get<int>();
    const double ts = e["ts"].get<double>() / 1e3;  // ms
    if (ph == "C" && pid == 0) {
      const double v = e.contains("args") ? e["args"].value("value", 0.0) : 0.0;
      labels += strfmt("set label 'overlap %.0f%%' at %.6g, %.6g left font ',9' tc rgb '#444444'\n", v, ts,
                       2.0 * nranks - 0.35);
      labels += strfmt("set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '#999999'\n", ts, ts);
      continue;
    }
    if (ph != "X" || !e.contains("dur")) continue;
    const int tid = e.value("tid", 1);
    const double dur = e["dur"].get<double>() / 1e3;
    t_end = std::max(t_end, ts + dur);
    for (Kind& k : kinds) {
      const bool match = k.tid == tid && (std::string(k.prefix).empty() || name.rfind(k.prefix, 0) == 0 ||
                                          (std::string(k.prefix) == "data" && (name == "eval" || name == "checkpoint")));
      if (!match) continue;
      k.rows += strfmt("%.6g %.6g %.6g %.6g\n", ts + dur / 2, row_y(pid, tid), dur / 2, tid == 1 ? 0.3 : 0.25);
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
                    plots.empty() ? "" : ", ", i, kinds[i].colour, gp_string(kinds[i].legend).c_str());
  }
  RZ_CHECK(!plots.empty(), "--trace: %s holds no spans", a.trace.c_str());
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
