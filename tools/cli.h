// The kvscatter command-line program is assembled from parts: each operator adds a section to
// `kvscatter demo` and a table to `kvscatter bench <name>` by defining a static registrar in
// its own tools/*.cc file; `kvscatter bench` alone runs the sweep over every operator.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
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

// Parse-time check of a comma-separated list of integers in [lo, hi]; `word` (e.g. "all"), when
// given, is accepted as an item too. A bad item is a usage error naming the option.
inline CLI::Validator int_list(std::int64_t lo, std::int64_t hi, std::string word = {}) {
  auto check = [lo, hi, word](std::string& text) -> std::string {
    const std::vector<std::string> items = split(text);
    if (items.empty()) return "expected a comma-separated list, got '" + text + "'";
    for (const std::string& t : items) {
      if (!word.empty() && t == word) continue;
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size() || v < lo || v > hi) {
        return "'" + t + "' is not an integer in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]" + (word.empty() ? "" : " or '" + word + "'");
      }
    }
    return {};
  };
  return CLI::Validator(check, "LIST", "int_list");
}

// Parse-time check of a comma-separated list of names drawn from `names`.
inline CLI::Validator name_list(std::vector<std::string> names) {
  auto check = [names](std::string& text) -> std::string {
    const std::vector<std::string> items = split(text);
    if (items.empty()) return "expected a comma-separated list, got '" + text + "'";
    for (const std::string& t : items) {
      if (std::find(names.begin(), names.end(), t) == names.end()) {
        std::string all;
        for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
        return "'" + t + "' is not one of " + all;
      }
    }
    return {};
  };
  return CLI::Validator(check, "LIST", "name_list");
}

struct DemoPart {
  std::string name;                            // e.g. "paged"
  int order = 100;                             // parts run in ascending order
  std::function<void(CLI::App&)> add_flags;    // options on the `demo` command (may be empty)
  std::function<bool()> run;                   // prints its report; false if verification failed
  // Checks the options together before any part runs; throws CLI::ValidationError naming the
  // options when the combination cannot run (may be empty).
  std::function<void()> check = {};
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
