// Small helpers shared by the C++ tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kvscatter/error.h"

namespace kvscatter::testing {

// Runs fn, expects a kvscatter::Error with `status` whose message contains every fragment.
inline void expect_error(const std::function<void()>& fn, Status status,
                         std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected kvscatter::Error, nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    const std::string msg = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message '" << msg << "' lacks '" << f << "'";
    }
  }
}

inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

}  // namespace kvscatter::testing
