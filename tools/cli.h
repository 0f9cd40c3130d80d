// The kvscatter command-line program is assembled from parts: each operator adds a section to
// `kvscatter demo` and a table to `kvscatter bench <name>` by defining a static registrar in
// its own tools/*.cc file; `kvscatter bench` alone runs the sweep over every operator.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <deque>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

// The parts declare their options through the small mirror of CLI11 below; main.cc, the only
// file that includes CLI11, hands them to it. CLI11 is header-only, and each file that includes
// it spends about 15 s more in the compiler (measured with g++ 12 at -O3), which the test
// command pays once per build.
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

// A parse-time check of an option's text, as main.cc gives it to CLI11: an integer or real range
// (CLI::Range), a set of allowed values (CLI::IsMember), or a function that returns an error
// message, empty when the text is fine (CLI::Validator).
struct Check {
  enum class Kind { int_range, real_range, int_members, name_members, function };
  Kind kind = Kind::function;
  std::int64_t lo = 0, hi = 0;
  double real_lo = 0, real_hi = 0;
  std::vector<std::int64_t> ints;
  std::vector<std::string> names;
  std::function<std::string(std::string&)> fn;
  std::string description, name;  // of a function check, for --help and messages
};

template <class T>
Check Range(T lo, T hi) {
  Check c;
  if constexpr (std::is_integral_v<T>) {
    c.kind = Check::Kind::int_range;
    c.lo = static_cast<std::int64_t>(lo);
    c.hi = static_cast<std::int64_t>(hi);
  } else {
    c.kind = Check::Kind::real_range;
    c.real_lo = static_cast<double>(lo);
    c.real_hi = static_cast<double>(hi);
  }
  return c;
}
inline Check IsMember(std::vector<std::int64_t> values) {
  Check c;
  c.kind = Check::Kind::int_members;
  c.ints = std::move(values);
  return c;
}
inline Check IsMember(std::vector<std::string> values) {
  Check c;
  c.kind = Check::Kind::name_members;
  c.names = std::move(values);
  return c;
}
inline Check Validator(std::function<std::string(std::string&)> fn, std::string description,
                       std::string name) {
  Check c;
  c.kind = Check::Kind::function;
  c.fn = std::move(fn);
  c.description = std::move(description);
  c.name = std::move(name);
  return c;
}

// One option as declared; its checks all apply (CLI11's `&`).
struct Option {
  using Target = std::variant<bool*, int*, std::int64_t*, std::uint64_t*, double*, std::string*,
                              std::vector<std::int64_t>*>;
  std::string name, help;
  Target target;
  bool flag = false;  // takes no value
  std::vector<Check> checks;
  char separator = 0;  // a list option's items may also come in one argument, separated by it
  bool show_default = false;
  Option* check(Check c) {
    checks.push_back(std::move(c));
    return this;
  }
  Option* delimiter(char d) {
    separator = d;
    return this;
  }
  Option* capture_default_str() {
    show_default = true;
    return this;
  }
};

// The options of one command (`demo`, `bench` or a bench subcommand). Pointers to the options
// stay valid as more are added.
class Command {
 public:
  template <class T>
  Option* add_option(std::string name, T& target, std::string help) {
    Option& o = options_.emplace_back();
    o.name = std::move(name);
    o.help = std::move(help);
    o.target = &target;
    return &o;
  }
  Option* add_flag(std::string name, bool& target, std::string help) {
    Option* o = add_option(std::move(name), target, std::move(help));
    o->flag = true;
    return o;
  }
  const std::deque<Option>& options() const { return options_; }

 private:
  std::deque<Option> options_;
};

// A usage error that a part finds in its options taken together; reported as CLI11 reports its
// own (exit status 2).
struct UsageError : std::runtime_error {
  UsageError(std::string option_names, const std::string& message)
      : std::runtime_error(message), options(std::move(option_names)) {}
  std::string options;
};

// Parse-time check of a comma-separated list of integers in [lo, hi]; `word` (e.g. "all"), when
// given, is accepted as an item too. A bad item is a usage error naming the option.
inline Check int_list(std::int64_t lo, std::int64_t hi, std::string word = {}) {
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
  return Validator(check, "LIST", "int_list");
}

// Parse-time check of a comma-separated list of names drawn from `names`.
inline Check name_list(std::vector<std::string> names) {
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
  return Validator(check, "LIST", "name_list");
}

struct DemoPart {
  std::string name;                            // e.g. "paged"
  int order = 100;                             // parts run in ascending order
  std::function<void(Command&)> add_flags;     // options on the `demo` command (may be empty)
  std::function<bool()> run;                   // prints its report; false if verification failed
  // Checks the options together before any part runs; throws UsageError naming the options
  // when the combination cannot run (may be empty).
  std::function<void()> check = {};
};

struct BenchPart {
  std::string name;                            // `kvscatter bench <name>`
  std::string description;
  std::function<void(Command&)> add_flags;     // options on its subcommand (may be empty)
  std::function<int()> run;                    // prints its table; returns an exit code
};

// `kvscatter bench` without a subcommand: every operator, shape and token count against memcpy
// (tools/bench_all.cc).
void add_bench_sweep_flags(Command& bench);
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
