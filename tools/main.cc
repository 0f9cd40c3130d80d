// kvscatter: info, demo (simulated decode loop verified against the reference kernels) and
// bench (the sweep over every operator, or per-operator tables, against memcpy of the same
// bytes).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>

#include "cli.h"
#include "core/streaming.h"
#include "kvscatter/error.h"
#include "kvscatter/runtime.h"
#include "simd_pin.h"

namespace kvscatter::cli {

std::vector<DemoPart>& demo_parts() {
  static std::vector<DemoPart> parts;
  return parts;
}
std::vector<BenchPart>& bench_parts() {
  static std::vector<BenchPart> parts;
  return parts;
}

namespace {

CLI::Validator to_cli(const Check& c) {
  switch (c.kind) {
    case Check::Kind::int_range:
      return CLI::Range(c.lo, c.hi);
    case Check::Kind::real_range:
      return CLI::Range(c.real_lo, c.real_hi);
    case Check::Kind::int_members:
      return CLI::IsMember(c.ints);
    case Check::Kind::name_members:
      return CLI::IsMember(c.names);
    case Check::Kind::function:
      break;
  }
  return CLI::Validator(c.fn, c.description, c.name);
}

// Declares a part's options on its CLI11 command (which keeps their targets and copies of the
// checks, not the declarations).
void declare(CLI::App& app, const Command& command) {
  for (const Option& spec : command.options()) {
    CLI::Option* o = std::visit(
        [&](auto* target) {
          if constexpr (std::is_same_v<decltype(target), bool*>) {
            if (spec.flag) return app.add_flag(spec.name, *target, spec.help);
          }
          return app.add_option(spec.name, *target, spec.help);
        },
        spec.target);
    if (spec.separator != 0) o->delimiter(spec.separator);
    if (!spec.checks.empty()) {
      CLI::Validator all = to_cli(spec.checks.front());
      for (std::size_t i = 1; i < spec.checks.size(); ++i) all = all & to_cli(spec.checks[i]);
      o->check(all);
    }
    if (spec.show_default) o->capture_default_str();
  }
}

// Runs a part's check of its options taken together, its usage errors as CLI11's.
void check_together(const std::function<void()>& check) {
  try {
    check();
  } catch (const UsageError& e) {
    throw CLI::ValidationError(e.options, e.what());
  }
}

}  // namespace
}  // namespace kvscatter::cli

int main(int argc, char** argv) {
  using namespace kvscatter;
  CLI::App app{"kvscatter: write new keys and values into LLM KV caches"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: KVSCATTER_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 4096));

  auto* info = app.add_subcommand(
      "info", "version, SIMD target, threads, streaming threshold and last-level cache");
  info->callback([] {
    std::printf("kvscatter %s\n", version_string());
    std::printf("simd target: %s\n", simd_target().c_str());
    std::printf("simd targets available: %s\n", simd_targets_available().c_str());
    std::printf("threads: %d\n", get_num_threads());
    // What the kernels' choice between ordinary and streaming stores starts from
    // (docs/architecture.md, "Streaming stores").
    const auto size = [](std::int64_t bytes) {
      constexpr std::int64_t kKiB = 1024, kMiB = kKiB * kKiB;
      if (bytes <= 0) return std::string("unknown");
      return bytes % kMiB == 0 ? std::to_string(bytes / kMiB) + " MiB"
                               : std::to_string(bytes / kKiB) + " KiB";
    };
    std::printf("streaming threshold: %s written\n",
                size(detail::stream_threshold_bytes().load()).c_str());
    std::printf("last-level cache: %s (Linux's figure for CPU 0, counted as at most %s)\n",
                size(detail::cache_bytes().load()).c_str(), size(detail::kMaxCacheBytes).c_str());
  });

  auto& demos = cli::demo_parts();
  std::sort(demos.begin(), demos.end(),
            [](const cli::DemoPart& a, const cli::DemoPart& b) { return a.order < b.order; });
  auto* demo = app.add_subcommand("demo", "simulated inference writing every layer's K/V, verified");
  cli::Command demo_options;
  for (auto& part : demos) {
    if (part.add_flags) part.add_flags(demo_options);
  }
  cli::declare(*demo, demo_options);
  int demo_rc = 0;
  demo->callback([&] {
    for (auto& part : demos) {
      if (part.check) cli::check_together(part.check);  // stops the demo before any part runs
    }
    for (auto& part : demos) {
      if (!part.run()) {
        std::printf("demo part '%s': VERIFICATION FAILED\n", part.name.c_str());
        demo_rc = 1;
      }
    }
    if (demo_rc == 0) std::printf("demo: all parts verified against the reference kernels\n");
  });

  auto* bench = app.add_subcommand(
      "bench", "every operator x shape x token count x {1, all} threads against memcpy; "
               "a subcommand prints one operator's tables");
  bench->require_subcommand(0, 1);
  cli::Command sweep_options;
  cli::add_bench_sweep_flags(sweep_options);
  cli::declare(*bench, sweep_options);
  bench->add_option_function<std::string>(
      "--simd",
      [](const std::string& name) {
        if (!cli::pin_simd_target(name)) throw CLI::ValidationError("--simd", "unavailable target");
      },
      "pin the SIMD target (AVX3, AVX2, SSE4, SCALAR ...; `kvscatter info` lists this "
      "machine's), for every table and sweep");
  int bench_rc = 0;
  for (auto& part : cli::bench_parts()) {
    auto* sub = bench->add_subcommand(part.name, part.description);
    if (part.add_flags) {
      cli::Command options;
      part.add_flags(options);
      cli::declare(*sub, options);
    }
    sub->callback([&part, &bench_rc] { bench_rc |= part.run(); });
  }
  bench->callback([&] {
    if (bench->get_subcommands().empty()) bench_rc |= cli::run_bench_sweep();
  });

  app.parse_complete_callback([&] {
    if (threads > 0) set_num_threads(threads);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit with 2, as the library's own argument errors do; --help with 0.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "kvscatter: error %d: %s\n", static_cast<int>(e.status()), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscatter: %s\n", e.what());
    return 2;
  }
  return demo_rc | bench_rc;
}
