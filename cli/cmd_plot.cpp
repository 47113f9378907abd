// cli/cmd_plot.cpp: `ringzero plot loss|memory|comm`, pictures through gnuplot (viz/plot.h).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/file.h"
#include "data/output_paths.h"
#include "cli/command.h"
#include "viz/plot.h"

namespace rz {
namespace {

// Before anything is read or drawn: every input is a regular file (a FIFO would block the
// read), and neither the picture nor its script beside it (OUT.gp) is written over an input
// or over anything but a regular file (base/file.h).
void check_plot_paths(const std::string& out, const std::vector<const std::vector<std::string>*>& lists,
                      const std::string& trace) {
  std::vector<RunPath> inputs;
  for (const auto* list : lists)
    for (const std::string& p : *list) inputs.push_back({"the input", p});
  if (!trace.empty()) inputs.push_back({"the input", trace});
  for (const RunPath& in : inputs) check_input_file(in.path, "plot input");
  CommandPaths paths;  // train's rules (data/output_paths.h): nor inside a prepared data directory
  paths.files = {{"--out", out}, {"--out's gnuplot script", out + ".gp"}};
  paths.inputs = inputs;
  check_outputs(paths);
}

int run_plot(int argc, char** argv) {
  CLI::App app{
      "Draw ringzero's results with gnuplot (Debian: gnuplot-nox) as PNG or SVG (from --out's extension).\n"
      "The gnuplot script is kept beside the picture (OUT.gp) so it can be restyled and rerun.",
      "ringzero plot"};
  app.require_subcommand(1);

  LossPlotArgs loss;
  CLI::App* l = app.add_subcommand("loss", "loss and validation loss against step or tokens, one line per --metrics file");
  l->add_option("--metrics", loss.metrics, "train --metrics JSONL files (repeatable: compare runs)")->required();
  l->add_option("--label", loss.labels, "a legend label per file (default: the file names)");
  l->add_option("--x", loss.x, "x axis: step or tokens")->check(CLI::IsMember({"step", "tokens"}))->capture_default_str();
  l->add_option("--smooth", loss.smooth, "draw the training loss as the mean of the last N steps (validation loss as logged)")
      ->capture_default_str();
  l->add_option("--out", loss.out, "picture to write: .png or .svg")->required();
  l->add_option("--title", loss.title, "title");

  MemoryPlotArgs mem;
  CLI::App* m = app.add_subcommand("memory", "bytes per rank by tag: estimates per strategy and N beside measured runs");
  m->add_option("--estimate", mem.estimates, "`ringzero memory --json` outputs");
  m->add_option("--measured", mem.measured, "train --memory-report files (repeatable)");
  m->add_option("--out", mem.out, "picture to write: .png or .svg")->required();
  m->add_option("--title", mem.title, "title");

  CommPlotArgs comm;
  CLI::App* c = app.add_subcommand("comm", "bus bandwidth against message size, one line per result file");
  c->add_option("--results", comm.results,
                "comm-bench outputs (--json lines or its table; bench/'s MPI and Gloo tables too)")->required();
  c->add_option("--label", comm.labels, "a legend label per file (default: op, transport and N, or the file name)");
  c->add_option("--out", comm.out, "picture to write: .png or .svg")->required();
  c->add_option("--title", comm.title, "title");
  TracePlotArgs tr;
  CLI::App* t = app.add_subcommand("trace", "a train --trace timeline as a still picture: compute and comm rows per rank");
  t->add_option("--trace", tr.trace, "train --trace (or bench-strategies --trace) JSON file")->required();
  t->add_option("--out", tr.out, "picture to write: .png or .svg")->required();
  t->add_option("--title", tr.title, "title");
  PrecisionPlotArgs prec;
  CLI::App* p = app.add_subcommand("precision", "a ring reduction's error against N, bf16 beside fp32 partial sums");
  p->add_option("--results", prec.results, "comm-bench --check-precision --json output")->required();
  p->add_option("--out", prec.out, "picture to write: .png or .svg")->required();
  p->add_option("--title", prec.title, "title");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  check_plot_paths(l->parsed()   ? loss.out
                   : m->parsed() ? mem.out
                   : t->parsed() ? tr.out
                                 : comm.out,
                   {&loss.metrics, &mem.estimates, &mem.measured, &comm.results}, tr.trace);
  std::string script, out;
  if (p->parsed()) {
    out = prec.out;
    plot_format(out);
    script = precision_plot_script(prec);
  } else if (l->parsed()) {
    out = loss.out;
    plot_format(out);
    script = loss_plot_script(loss);
  } else if (m->parsed()) {
    out = mem.out;
    plot_format(out);
    script = memory_plot_script(mem);
  } else if (t->parsed()) {
    out = tr.out;
    plot_format(out);
    script = trace_plot_script(tr);
  } else {
    out = comm.out;
    plot_format(out);
    script = comm_plot_script(comm);
  }
  run_gnuplot(script, out);
  std::printf("plot: wrote %s (gnuplot script: %s.gp)\n", out.c_str(), out.c_str());
  return 0;
}

const RegisterCommand kRegister{Command{"plot", "pictures through gnuplot: loss curves, memory by tag, comm bandwidth, trace timelines, reduction precision",
                                        run_plot, 62}};

}  // namespace
}  // namespace rz
