// The kvscatter command-line program is assembled from parts: each operator adds a section to
// `kvscatter demo` and a table to `kvscatter bench <name>` by defining a static registrar in
// its own tools/*.cc file; `kvscatter bench` alone runs the sweep over every operator.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace kvscatter::cli {

// "a,b,,c" -> {"a", "b", "c"}: the comma-separated lists of the bench options.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct DemoPart {
  std::string name;                            // e.g. "paged"
  int order = 100;                             // parts run in ascending order
  std::function<void(CLI::App&)> add_flags;    // options on the `demo` command (may be empty)
  std::function<bool()> run;                   // prints its report; false if verification failed
};

struct BenchPart {
  std::string name;                            // `kvscatter bench <name>`
  std::string description;
  std::function<void(CLI::App&)> add_flags;    // options on its subcommand (may be empty)
  std::function<int()> run;                    // prints its table; returns an exit code
};

// `kvscatter bench` without a subcommand: every operator, shape and token count against memcpy
// (tools/bench_all.cc).
void add_bench_sweep_flags(CLI::App& bench);
int run_bench_sweep();

std::vector<DemoPart>& demo_parts();
std::vector<BenchPart>& bench_parts();

struct RegisterDemo {
  explicit RegisterDemo(DemoPart part) { demo_parts().push_back(std::move(part)); }
};
struct RegisterBench {
  explicit RegisterBench(BenchPart part) { bench_parts().push_back(std::move(part)); }
};

}  // namespace kvscatter::cli
