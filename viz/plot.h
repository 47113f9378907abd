// viz/plot.h: `ringzero plot`: pictures of ringzero's own JSON outputs, drawn by gnuplot.
//
// Each function reads result files, checks them (a bad line or field is an error naming
// file:line or file and the field), and returns a complete gnuplot script with the data
// inline (gnuplot 5 data blocks), so the picture needs nothing but the script. Text in the
// script (labels, titles, the output name) passes viz/gnuplot.h's gp_string, so nothing
// from the input can run as gnuplot code. run_gnuplot() feeds the script on its stdin to the
// gnuplot found on PATH (Debian: gnuplot-nox), with no shell, and checks that the picture
// was written.
//
//   loss    --metrics runs (train --metrics JSONL): loss and val_loss against step or tokens
//   memory  `ringzero memory --json` estimates and/or measured --memory-report files: bytes
//           per rank by tag (params, grads, master, adam_m, adam_v, comm, activations,
//           workspace) as stacked bars per strategy and N, the two side by side
//   comm    comm-bench results (--json lines, its table, or bench/'s MPI and Gloo tables):
//           bus bandwidth against message size, one line per file
//   trace   a train --trace file as a still picture (Perfetto shows it interactively)
//   precision  comm-bench --check-precision --json: the reduction's relative error against N
//           for bf16 and fp32 partial sums (log-log), beside one bf16 rounding and sqrt(N)
#pragma once

#include <string>
#include <vector>

namespace rz {

// "png" or "svg" from the output path's extension; throws naming --out otherwise.
std::string plot_format(const std::string& out_path);

struct LossPlotArgs {
  std::vector<std::string> metrics;  // JSONL files
  std::vector<std::string> labels;   // one per file, or empty (file names)
  std::string x = "step";            // step | tokens
  int smooth = 1;                    // training loss as the mean of the last `smooth` steps (1: as logged)
  std::string out;
  std::string title;
};
std::string loss_plot_script(const LossPlotArgs& a);

struct MemoryPlotArgs {
  std::vector<std::string> estimates;  // `ringzero memory --json` outputs
  std::vector<std::string> measured;   // train --memory-report files
  std::string out;
  std::string title;
};
std::string memory_plot_script(const MemoryPlotArgs& a);

struct CommPlotArgs {
  std::vector<std::string> results;  // comm-bench outputs
  std::vector<std::string> labels;
  std::string out;
  std::string title;
};
std::string comm_plot_script(const CommPlotArgs& a);

struct TracePlotArgs {
  std::string trace;  // train --trace output
  std::string out;
  std::string title;
};
// Each rank's compute and comm rows as boxes against time (ms), one colour per kind of
// span, and each step's overlap % written above it: a still picture of the timeline.
std::string trace_plot_script(const TracePlotArgs& a);

struct PrecisionPlotArgs {
  std::string results;  // comm-bench --check-precision --json output
  std::string out;
  std::string title;
};
std::string precision_plot_script(const PrecisionPlotArgs& a);

// Runs gnuplot on script; throws a one-line error when gnuplot is missing, fails, or
// leaves out_path empty.
void run_gnuplot(const std::string& script, const std::string& out_path);

}  // namespace rz
