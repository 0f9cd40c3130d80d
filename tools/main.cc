// kvscatter: info, demo (simulated decode loop verified against the reference kernels) and
// bench (the sweep over every operator, or per-operator tables, against memcpy of the same
// bytes).
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli.h"
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

}  // namespace kvscatter::cli

int main(int argc, char** argv) {
  using namespace kvscatter;
  CLI::App app{"kvscatter: write new keys and values into LLM KV caches"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: KVSCATTER_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 4096));

  auto* info = app.add_subcommand("info", "version, SIMD target and threads");
  info->callback([] {
    std::printf("kvscatter %s\n", version_string());
    std::printf("simd target: %s\n", simd_target().c_str());
    std::printf("simd targets available: %s\n", simd_targets_available().c_str());
    std::printf("threads: %d\n", get_num_threads());
  });

  auto& demos = cli::demo_parts();
  std::sort(demos.begin(), demos.end(),
            [](const cli::DemoPart& a, const cli::DemoPart& b) { return a.order < b.order; });
  auto* demo = app.add_subcommand("demo", "simulated inference writing every layer's K/V, verified");
  for (auto& part : demos) {
    if (part.add_flags) part.add_flags(*demo);
  }
  int demo_rc = 0;
  demo->callback([&] {
    for (auto& part : demos) {
      if (part.check) part.check();  // a usage error stops the demo before any part runs
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
  cli::add_bench_sweep_flags(*bench);
  bench->add_option_function<std::string>(
      "--simd",
      [](const std::string& name) {
        if (!cli::pin_simd_target(name)) throw CLI::ValidationError("--simd", "unavailable target");
      },
      "pin the SIMD target (AVX3, AVX2, SSE4, SCALAR ...; `kvscatter info` lists this "
      "machine's), for every table and sweep");
  int bench_rc = 0;
  std::vector<CLI::App*> bench_cmds;
  for (auto& part : cli::bench_parts()) {
    auto* sub = bench->add_subcommand(part.name, part.description);
    if (part.add_flags) part.add_flags(*sub);
    sub->callback([&part, &bench_rc] { bench_rc |= part.run(); });
    bench_cmds.push_back(sub);
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
