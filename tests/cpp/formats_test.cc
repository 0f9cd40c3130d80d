// Tests of the number formats (docs/formats.md).
//
// Decoders are checked on every code against formulas or the formats' tables written out here.
// Encoders are checked against an independent formulation: the nearest value among the
// format's decoded magnitudes (in double), with the format's tie rule and overflow rule. The CI
// sweep covers every float32 exponent and every float32 within 2 ulps of every representable
// value and rounding midpoint; tests named *Exhaustive* sweep all 2^32 float32 patterns and
// are run under the CTest label `exhaustive`.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/batch_internal.h"
#include "kvscatter/formats.h"
#include "simd_targets.h"

namespace kvscatter::formats {
namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// ---- independent encoder formulation ---------------------------------------------------------

enum class Tie { kEven, kAway, kUp };

// A format as a sorted table of its finite non-negative magnitudes and their codes.
struct Reference {
  std::vector<double> mag;    // ascending
  std::vector<std::uint32_t> code;
  double beyond_max = 0;      // the next value past the largest finite one, had it existed
  std::uint32_t overflow = 0;  // code (no sign) for values that round to beyond_max
  Tie tie = Tie::kEven;
  std::uint32_t sign_bit = 0;  // 0: no sign (e8m0)
  bool signed_zero = true;
  std::uint32_t (*nan)(std::uint32_t f32_bits) = nullptr;  // expected code for a NaN input
  // Inputs handled before the nearest-value rule (e8m0's zero, negatives and subnormals);
  // returns true when it set *out.
  bool (*special)(std::uint32_t f32_bits, std::uint32_t* out) = nullptr;

  // Index i with mag[i] <= m < mag[i+1] (i = last when m >= mag.back()); `hint` makes an
  // increasing sweep O(1) per step.
  std::size_t locate(double m, std::size_t hint) const {
    const std::size_t last = mag.size() - 1;
    auto fits = [&](std::size_t i) { return mag[i] <= m && (i == last || m < mag[i + 1]); };
    if (hint <= last && fits(hint)) return hint;
    if (hint + 1 <= last && fits(hint + 1)) return hint + 1;
    const auto it = std::upper_bound(mag.begin(), mag.end(), m);
    return static_cast<std::size_t>(it - mag.begin()) - 1;
  }

  std::uint32_t expected(float x, std::size_t* hint = nullptr) const {
    const std::uint32_t b = bits(x);
    if (std::isnan(x)) return nan(b);
    std::uint32_t out = 0;
    if (special != nullptr && special(b, &out)) return out;
    const double m = std::fabs(static_cast<double>(x));
    std::size_t local = 0;
    std::size_t& h = hint != nullptr ? *hint : local;
    h = locate(m, h);
    const bool at_end = h + 1 == mag.size();
    const double lo = mag[h];
    const double hi = at_end ? beyond_max : mag[h + 1];
    const std::uint32_t lo_code = code[h];
    const std::uint32_t hi_code = at_end ? overflow : code[h + 1];
    std::uint32_t c;
    if (m >= hi) {
      c = hi_code;
    } else {
      const double mid = 0.5 * (lo + hi);
      if (m < mid) {
        c = lo_code;
      } else if (m > mid) {
        c = hi_code;
      } else if (tie == Tie::kEven) {
        c = (lo_code & 1u) == 0 ? lo_code : hi_code;  // adjacent codes alternate parity
      } else {
        c = hi_code;  // away from zero / up: the larger magnitude
      }
    }
    if (c == 0 && !signed_zero) return 0;
    return (b >> 31) != 0 ? (c | sign_bit) : c;
  }
};

// Table from the formula value(code) of a format whose magnitude codes 0..max_code increase
// with the value.
template <class F>
void fill_monotonic(Reference& r, std::uint32_t max_code, F value) {
  for (std::uint32_t c = 0; c <= max_code; ++c) {
    r.mag.push_back(value(c));
    r.code.push_back(c);
  }
}

// value of a binary float magnitude code with `mant` mantissa bits and exponent bias `bias`.
double ieee_like(std::uint32_t c, int mant, int bias) {
  const int e = static_cast<int>(c >> mant);
  const double m = static_cast<double>(c & ((1u << mant) - 1));
  if (e == 0) return std::ldexp(m, 1 - bias - mant);
  return std::ldexp(1.0 + m / std::ldexp(1.0, mant), e - bias);
}

Reference make_bfloat16() {
  Reference r;
  fill_monotonic(r, 0x7F7F, [](std::uint32_t c) { return ieee_like(c, 7, 127); });
  r.beyond_max = std::ldexp(1.0, 128);
  r.overflow = 0x7F80;
  r.sign_bit = 0x8000;
  r.nan = [](std::uint32_t b) { return (b >> 16) | 0x40u; };
  return r;
}

Reference make_float16() {
  Reference r;
  fill_monotonic(r, 0x7BFF, [](std::uint32_t c) { return ieee_like(c, 10, 15); });
  r.beyond_max = 65536.0;
  r.overflow = 0x7C00;
  r.sign_bit = 0x8000;
  r.nan = [](std::uint32_t b) { return ((b >> 16) & 0x8000u) | 0x7E00u | ((b >> 13) & 0x3FFu); };
  return r;
}

Reference make_e4m3fn() {
  Reference r;
  fill_monotonic(r, 0x7E, [](std::uint32_t c) { return ieee_like(c, 3, 7); });
  r.beyond_max = 480.0;
  r.overflow = 0x7F;  // NaN
  r.sign_bit = 0x80;
  r.nan = [](std::uint32_t b) { return ((b >> 24) & 0x80u) | 0x7Fu; };
  return r;
}

Reference make_e5m2() {
  Reference r;
  fill_monotonic(r, 0x7B, [](std::uint32_t c) { return ieee_like(c, 2, 15); });
  r.beyond_max = 65536.0;
  r.overflow = 0x7C;
  r.sign_bit = 0x80;
  r.nan = [](std::uint32_t b) { return ((b >> 24) & 0x80u) | 0x7Eu; };
  return r;
}

Reference make_e2m1() {
  Reference r;
  fill_monotonic(r, 0x7, [](std::uint32_t c) { return ieee_like(c, 1, 1); });
  r.beyond_max = 8.0;
  r.overflow = 0x7;  // saturates
  r.sign_bit = 0x8;
  r.nan = [](std::uint32_t b) { return (b >> 31) != 0 ? 0x0u : 0x8u; };
  return r;
}

Reference make_e8m0() {
  Reference r;
  fill_monotonic(r, 0xFE, [](std::uint32_t c) { return std::ldexp(1.0, static_cast<int>(c) - 127); });
  r.beyond_max = std::ldexp(1.0, 128);
  r.overflow = 0xFF;
  r.tie = Tie::kUp;
  r.sign_bit = 0;
  r.nan = [](std::uint32_t) { return 0xFFu; };
  r.special = [](std::uint32_t b, std::uint32_t* out) {
    if ((b >> 31) != 0 || b == 0) {  // negatives and zero have no code
      *out = 0xFF;
      return true;
    }
    if (b < 0x800000u) {  // float32 subnormals, as ml_dtypes rounds them
      *out = b > 0x400000u ? 1u : 0u;
      return true;
    }
    return false;
  };
  return r;
}

// HiFloat8 decode table (positive half).
struct HiF8Row {
  const char* hi;
  const char* v[8];
};
constexpr HiF8Row kHiF8Table[16] = {
    {"0x00", {"0", "2^-22", "2^-21", "2^-20", "2^-19", "2^-18", "2^-17", "2^-16"}},
    {"0x08", {"1", "9*2^-3", "5*2^-2", "11*2^-3", "3*2^-1", "13*2^-3", "7*2^-2", "15*2^-3"}},
    {"0x10", {"2", "9*2^-2", "5*2^-1", "11*2^-2", "3", "13*2^-2", "7*2^-1", "15*2^-2"}},
    {"0x18", {"2^-1", "9*2^-4", "5*2^-3", "11*2^-4", "3*2^-2", "13*2^-4", "7*2^-3", "15*2^-4"}},
    {"0x20", {"4", "9*2^-1", "5", "11*2^-1", "6", "13*2^-1", "7", "15*2^-1"}},
    {"0x28", {"8", "9", "10", "11", "12", "13", "14", "15"}},
    {"0x30", {"2^-2", "9*2^-5", "5*2^-4", "11*2^-5", "3*2^-3", "13*2^-5", "7*2^-4", "15*2^-5"}},
    {"0x38", {"2^-3", "9*2^-6", "5*2^-5", "11*2^-6", "3*2^-4", "13*2^-6", "7*2^-5", "15*2^-6"}},
    {"0x40", {"16", "20", "24", "28", "32", "40", "48", "56"}},
    {"0x48", {"64", "80", "96", "112", "128", "160", "192", "224"}},
    {"0x50", {"2^-4", "5*2^-6", "3*2^-5", "7*2^-6", "2^-5", "5*2^-7", "3*2^-6", "7*2^-7"}},
    {"0x58", {"2^-6", "5*2^-8", "3*2^-7", "7*2^-8", "2^-7", "5*2^-9", "3*2^-8", "7*2^-9"}},
    {"0x60", {"256", "384", "512", "768", "1024", "1536", "2048", "3072"}},
    {"0x68", {"4096", "6144", "8192", "12288", "16384", "24576", "32768", "**Inf**"}},
    {"0x70", {"2^-8", "3*2^-9", "2^-9", "3*2^-10", "2^-10", "3*2^-11", "2^-11", "3*2^-12"}},
    {"0x78", {"2^-12", "3*2^-13", "2^-13", "3*2^-14", "2^-14", "3*2^-15", "2^-15", "3*2^-16"}},
};

// Parses "a", "2^b", "a*2^b" or "**Inf**".
double parse_table_value(const std::string& s) {
  if (s == "**Inf**") return std::numeric_limits<double>::infinity();
  const auto star = s.find('*');
  const auto caret = s.find("2^");
  if (caret == std::string::npos) return std::stod(s);
  const double a = star == std::string::npos ? 1.0 : std::stod(s.substr(0, star));
  return std::ldexp(a, std::stoi(s.substr(caret + 2)));
}

// Positive HiFloat8 values by code 0x00..0x7F, from the table.
std::vector<double> hifloat8_table() {
  std::vector<double> v(128);
  for (const HiF8Row& row : kHiF8Table) {
    const auto base = static_cast<std::size_t>(std::stoul(row.hi, nullptr, 16));
    for (std::size_t j = 0; j < 8; ++j) v[base + j] = parse_table_value(row.v[j]);
  }
  return v;
}

Reference make_hifloat8(bool saturate) {
  Reference r;
  const std::vector<double> table = hifloat8_table();
  std::vector<std::pair<double, std::uint32_t>> finite;
  for (std::uint32_t c = 0; c < 128; ++c) {
    if (!std::isinf(table[c])) finite.emplace_back(table[c], c);
  }
  std::sort(finite.begin(), finite.end());
  for (const auto& [v, c] : finite) {
    r.mag.push_back(v);
    r.code.push_back(c);
  }
  // Past 2^15 the next value on the dot-4 grid would be 1.5 * 2^15; its midpoint
  // 1.25 * 2^15 is where overflow starts.
  r.beyond_max = 1.5 * 32768.0;
  r.overflow = saturate ? 0x6E : 0x6F;
  r.tie = Tie::kAway;
  r.sign_bit = 0x80;
  r.signed_zero = false;
  r.nan = saturate ? [](std::uint32_t) { return 0x00u; } : [](std::uint32_t) { return 0x80u; };
  return r;
}

struct Format {
  const char* name;
  Reference ref;
  std::uint32_t (*encode)(float);
};

const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      {"bfloat16", make_bfloat16(), [](float x) -> std::uint32_t { return encode_bfloat16(x); }},
      {"float16", make_float16(), [](float x) -> std::uint32_t { return encode_float16(x); }},
      {"float8_e4m3fn", make_e4m3fn(),
       [](float x) -> std::uint32_t { return encode_float8_e4m3fn(x); }},
      {"float8_e5m2", make_e5m2(), [](float x) -> std::uint32_t { return encode_float8_e5m2(x); }},
      {"float8_e8m0", make_e8m0(), [](float x) -> std::uint32_t { return encode_float8_e8m0(x); }},
      {"float4_e2m1", make_e2m1(), [](float x) -> std::uint32_t { return encode_float4_e2m1(x); }},
      {"hifloat8_sat", make_hifloat8(true),
       [](float x) -> std::uint32_t { return encode_hifloat8(x, true); }},
      {"hifloat8_nosat", make_hifloat8(false),
       [](float x) -> std::uint32_t { return encode_hifloat8(x, false); }},
  };
  return all;
}

const Format& format(const std::string& name) {
  for (const Format& f : formats()) {
    if (name == f.name) return f;
  }
  std::abort();
}

// Float32 inputs of the CI sweep for one format: every exponent with several mantissas, and
// +-2 ulps around every representable magnitude and every rounding midpoint (including the
// overflow threshold and the zero/subnormal boundary), with both signs.
std::vector<float> sweep_inputs(const Reference& r) {
  std::vector<std::uint32_t> mags;
  std::mt19937 rng(12345);
  for (std::uint32_t e = 0; e < 256; ++e) {
    for (std::uint32_t m : {0x0u, 0x1u, 0x2u, 0x200000u, 0x3FFFFFu, 0x400000u, 0x400001u,
                            0x600000u, 0x7FFFFEu, 0x7FFFFFu}) {
      mags.push_back(e << 23 | m);
    }
    for (int k = 0; k < 8; ++k) mags.push_back(e << 23 | (rng() & 0x7FFFFFu));
  }
  auto around = [&](double p) {
    if (!(p <= std::numeric_limits<float>::max())) return;
    const std::uint32_t c = bits(static_cast<float>(p));
    for (std::uint32_t d = 0; d <= 2; ++d) {
      mags.push_back(c + d);
      if (c >= d) mags.push_back(c - d);
    }
  };
  for (std::size_t i = 0; i < r.mag.size(); ++i) {
    const double next = i + 1 < r.mag.size() ? r.mag[i + 1] : r.beyond_max;
    around(r.mag[i]);
    around(0.5 * (r.mag[i] + next));
  }
  around(r.beyond_max);
  std::vector<float> out;
  out.reserve(mags.size() * 2);
  for (std::uint32_t m : mags) {
    if (m > 0x7FFFFFFFu) continue;
    out.push_back(from_bits(m));
    out.push_back(from_bits(m | 0x80000000u));
  }
  return out;
}

void expect_matches_reference(const Format& f, const std::vector<float>& inputs) {
  int failures = 0;
  for (float x : inputs) {
    const std::uint32_t want = f.ref.expected(x);
    const std::uint32_t got = f.encode(x);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << f.name << ": encode(" << hex(bits(x)) << " = " << x << ") = " << hex(got)
                    << ", expected " << hex(want);
    }
  }
  EXPECT_EQ(failures, 0) << f.name;
}

// ---- decode of every code -----------------------------------------------------------------

// Compares bit patterns, so NaN payloads and the sign of zero count.
#define EXPECT_F32_BITS(got, want)                                            \
  EXPECT_EQ(bits(got), bits(want)) << "got " << (got) << " want " << (want)

TEST(FormatsDecode, Bfloat16EveryCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float got = decode_bfloat16(static_cast<std::uint16_t>(c));
    const std::uint32_t e = (c >> 7) & 0xFF;
    const double sign = (c & 0x8000) != 0 ? -1.0 : 1.0;
    if (e == 0xFF) {
      // Inf and every NaN keep their exact pattern (the top half of the float32).
      ASSERT_EQ(bits(got), c << 16) << hex(c);
    } else {
      const float want = static_cast<float>(sign * ieee_like(c & 0x7FFF, 7, 127));
      ASSERT_EQ(bits(got), bits(want)) << hex(c);
    }
  }
}

TEST(FormatsDecode, Float16EveryCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float got = decode_float16(static_cast<std::uint16_t>(c));
    const std::uint32_t e = (c >> 10) & 0x1F;
    const std::uint32_t m = c & 0x3FF;
    const std::uint32_t sign = (c & 0x8000) << 16;
    if (e == 0x1F) {
      // Inf, and NaN with the payload kept unquieted as numpy does.
      ASSERT_EQ(bits(got), sign | 0x7F800000u | m << 13) << hex(c);
    } else {
      const double v = ieee_like(c & 0x7FFF, 10, 15);
      const float want = static_cast<float>(sign != 0 ? -v : v);
      ASSERT_EQ(bits(got), bits(want)) << hex(c);
    }
  }
  EXPECT_EQ(decode_float16(0x7BFF), 65504.0f);
  EXPECT_EQ(decode_float16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(decode_float16(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(bits(decode_float16(0x8000)), 0x80000000u);
}

void expect_small_float_decode(float (*decode_fn)(std::uint8_t), int mant, int bias,
                               std::uint32_t code_bits, std::uint32_t inf_mag,
                               std::uint32_t first_nan_mag) {
  const std::uint32_t sign_bit = 1u << (code_bits - 1);
  for (std::uint32_t c = 0; c < (1u << code_bits); ++c) {
    const float got = decode_fn(static_cast<std::uint8_t>(c));
    const std::uint32_t mag = c & (sign_bit - 1);
    const std::uint32_t sign = (c & sign_bit) != 0 ? 0x80000000u : 0u;
    if (mag >= first_nan_mag) {
      ASSERT_EQ(bits(got), sign | 0x7FC00000u) << hex(c);  // canonical quiet NaN, sign kept
    } else if (mag == inf_mag) {
      ASSERT_EQ(bits(got), sign | 0x7F800000u) << hex(c);
    } else {
      const double v = ieee_like(mag, mant, bias);
      ASSERT_EQ(bits(got), bits(static_cast<float>(sign != 0 ? -v : v))) << hex(c);
    }
  }
}

TEST(FormatsDecode, Float8E4M3FnEveryCode) {
  expect_small_float_decode(decode_float8_e4m3fn, 3, 7, 8, /*no inf*/ 0x100, 0x7F);
  EXPECT_EQ(decode_float8_e4m3fn(0x7E), 448.0f);
  EXPECT_EQ(decode_float8_e4m3fn(0x01), std::ldexp(1.0f, -9));
}

TEST(FormatsDecode, Float8E5M2EveryCode) {
  expect_small_float_decode(decode_float8_e5m2, 2, 15, 8, 0x7C, 0x7D);
  EXPECT_EQ(decode_float8_e5m2(0x7B), 57344.0f);
  EXPECT_EQ(decode_float8_e5m2(0x01), std::ldexp(1.0f, -16));
}

TEST(FormatsDecode, Float4E2M1EveryCode) {
  expect_small_float_decode(decode_float4_e2m1, 1, 1, 4, /*no inf*/ 0x100, /*no NaN*/ 0x100);
  // float4_e2m1: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; 8 = -0; 9..15 the negatives.
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (std::uint8_t c = 0; c < 8; ++c) {
    EXPECT_F32_BITS(decode_float4_e2m1(c), values[c]);
    EXPECT_F32_BITS(decode_float4_e2m1(static_cast<std::uint8_t>(c | 8)), -values[c]);
  }
  // Only the low nibble is read.
  EXPECT_EQ(decode_float4_e2m1(0xF7), 6.0f);
}

TEST(FormatsDecode, Float4E1M2EveryCode) {
  expect_small_float_decode(decode_float4_e1m2, 2, 1, 4, /*no inf*/ 0x100, /*no NaN*/ 0x100);
  const float values[8] = {0, 0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f, 1.75f};
  for (std::uint8_t c = 0; c < 8; ++c) {
    EXPECT_F32_BITS(decode_float4_e1m2(c), values[c]);
    EXPECT_F32_BITS(decode_float4_e1m2(static_cast<std::uint8_t>(c | 8)), -values[c]);
    EXPECT_EQ(decode(DType::float4_e1m2, c), values[c]);
  }
  EXPECT_EQ(decode_float4_e1m2(0xF7), 1.75f);
}

// Every float32 of a dense sample against a brute-force nearest-value search over the table:
// ties go to the even code, magnitudes past 1.75 saturate, the sign (of zero too) is kept.
TEST(FormatsEncode, Float4E1M2MatchesNearestTableValue) {
  const double values[8] = {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75};
  auto nearest = [&](float x) {
    const std::uint8_t sign = std::signbit(x) ? 8 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= 1.75) return static_cast<std::uint8_t>(sign | 7);
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const double d = std::fabs(a - values[c]), db = std::fabs(a - values[best]);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return static_cast<std::uint8_t>(sign | best);
  };
  for (std::uint32_t b = 0; b < 0xFF800000u; b += 0x1357u) {
    const float x = std::bit_cast<float>(b);
    if (std::isnan(x)) continue;
    ASSERT_EQ(encode_float4_e1m2(x), nearest(x)) << std::hexfloat << x;
    ASSERT_EQ(encode(DType::float4_e1m2, x), nearest(x));
  }
  for (float x : {0.125f, 0.375f, 0.625f, 0.875f, 1.125f, 1.375f, 1.625f, 1.875f, 1.9f, 2.0f,
                  -0.125f, -1.875f, -0.0f, INFINITY, -INFINITY, 1e30f}) {
    EXPECT_EQ(encode_float4_e1m2(x), nearest(x)) << x;
  }
  EXPECT_EQ(encode_float4_e1m2(0.125f), 0x0);  // tie between 0 and 0.25: even code 0
  EXPECT_EQ(encode_float4_e1m2(0.375f), 0x2);  // tie between 0.25 and 0.5: even code 2
  EXPECT_EQ(encode_float4_e1m2(1.875f), 0x7);  // saturates
  EXPECT_EQ(encode_float4_e1m2(-INFINITY), 0xF);
  EXPECT_EQ(encode_float4_e1m2(std::nanf("")), 0x8);
  for (std::uint8_t c = 0; c < 16; ++c) EXPECT_EQ(encode_float4_e1m2(decode_float4_e1m2(c)), c);
}

TEST(FormatsDecode, Float8E8M0EveryCode) {
  for (std::uint32_t c = 0; c < 255; ++c) {
    const float want = static_cast<float>(std::ldexp(1.0, static_cast<int>(c) - 127));
    ASSERT_EQ(bits(decode_float8_e8m0(static_cast<std::uint8_t>(c))), bits(want)) << hex(c);
  }
  EXPECT_EQ(bits(decode_float8_e8m0(0xFF)), 0x7FC00000u);
  // float8_e8m0: scale byte 0x80 = 2; the mode-1 examples 0x77 = 2^-8, 0x7F = 1, 0x69 = 2^-22.
  EXPECT_EQ(decode_float8_e8m0(0x80), 2.0f);
  EXPECT_EQ(decode_float8_e8m0(0x77), std::ldexp(1.0f, -8));
  EXPECT_EQ(decode_float8_e8m0(0x7F), 1.0f);
  EXPECT_EQ(decode_float8_e8m0(0x69), std::ldexp(1.0f, -22));
}

TEST(FormatsDecode, HiFloat8EveryCodeMatchesSpecTable) {
  const std::vector<double> table = hifloat8_table();
  for (std::uint32_t c = 0; c < 256; ++c) {
    const float got = decode_hifloat8(static_cast<std::uint8_t>(c));
    if (c == 0x80) {
      EXPECT_EQ(bits(got), 0x7FC00000u) << "NaN";
      continue;
    }
    const double v = table[c & 0x7F];
    const float want = static_cast<float>((c & 0x80) != 0 ? -v : v);
    EXPECT_EQ(bits(got), bits(want)) << hex(c);
  }
  // Special codes of HiFloat8.
  EXPECT_EQ(decode_hifloat8(0x6F), std::numeric_limits<float>::infinity());
  EXPECT_EQ(decode_hifloat8(0xEF), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(decode_hifloat8(0x6E), 32768.0f);
  EXPECT_EQ(decode_hifloat8(0x7E), std::ldexp(1.0f, -15));
  EXPECT_EQ(decode_hifloat8(0x01), std::ldexp(1.0f, -22));
  EXPECT_EQ(bits(decode_hifloat8(0x00)), 0u);
}

TEST(FormatsDecode, GenericByDType) {
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    EXPECT_EQ(bits(decode(DType::hifloat8, c)), bits(decode_hifloat8(b)));
    EXPECT_EQ(bits(decode(DType::float8_e4m3fn, c)), bits(decode_float8_e4m3fn(b)));
    EXPECT_EQ(bits(decode(DType::float8_e5m2, c)), bits(decode_float8_e5m2(b)));
    EXPECT_EQ(bits(decode(DType::float8_e8m0, c)), bits(decode_float8_e8m0(b)));
    EXPECT_EQ(bits(decode(DType::float4_e2m1, c & 0xF)), bits(decode_float4_e2m1(b)));
    EXPECT_EQ(bits(decode(DType::bfloat16, c << 8)),
              bits(decode_bfloat16(static_cast<std::uint16_t>(c << 8))));
    EXPECT_EQ(bits(decode(DType::float16, c << 8)),
              bits(decode_float16(static_cast<std::uint16_t>(c << 8))));
  }
  EXPECT_EQ(bits(decode(DType::float32, 0x3F800001u)), 0x3F800001u);
  EXPECT_TRUE(std::isnan(decode(DType::int8, 1)));
  const float probes[] = {0.0f, -0.0f, 1.0f, -2.5f, 1e30f, 3e-8f, -1e-40f, NAN};
  for (float x : probes) {
    EXPECT_EQ(encode(DType::float32, x), bits(x));
    EXPECT_EQ(encode(DType::float16, x), encode_float16(x));
    EXPECT_EQ(encode(DType::bfloat16, x), encode_bfloat16(x));
    EXPECT_EQ(encode(DType::hifloat8, x), encode_hifloat8(x, true));
    EXPECT_EQ(encode(DType::float8_e5m2, x), encode_float8_e5m2(x));
    EXPECT_EQ(encode(DType::float8_e4m3fn, x), encode_float8_e4m3fn(x));
    EXPECT_EQ(encode(DType::float8_e8m0, x), encode_float8_e8m0(x));
    EXPECT_EQ(encode(DType::float4_e2m1, x), encode_float4_e2m1(x));
    EXPECT_EQ(encode(DType::int32, x), 0u);
  }
}

// Every finite code decodes to a value that encodes back to the same code (for the canonical
// code of each value).
TEST(FormatsDecode, RoundTripEveryFiniteCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const auto h = static_cast<std::uint16_t>(c);
    if ((c & 0x7F80) != 0x7F80) {
      EXPECT_EQ(encode_bfloat16(decode_bfloat16(h)), h) << hex(c);
    }
    if ((c & 0x7C00) != 0x7C00) {
      EXPECT_EQ(encode_float16(decode_float16(h)), h) << hex(c);
    }
  }
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    if ((c & 0x7F) != 0x7F) {
      EXPECT_EQ(encode_float8_e4m3fn(decode_float8_e4m3fn(b)), b);
    }
    if ((c & 0x7F) < 0x7C) {
      EXPECT_EQ(encode_float8_e5m2(decode_float8_e5m2(b)), b);
    }
    if (c != 0xFF) {
      EXPECT_EQ(encode_float8_e8m0(decode_float8_e8m0(b)), b);
    }
    if (c < 16) {
      EXPECT_EQ(encode_float4_e2m1(decode_float4_e2m1(b)), b);
    }
    if (c != 0x80 && (c & 0x7F) != 0x6F) {
      EXPECT_EQ(encode_hifloat8(decode_hifloat8(b), true), b) << hex(c);
      EXPECT_EQ(encode_hifloat8(decode_hifloat8(b), false), b) << hex(c);
    }
  }
}

// ---- worked examples of every format, verbatim --------------------------------------------------

TEST(FormatsSpecExamples, Bfloat16) {
  // 1.00390625 -> 0x3F80; 1.01171875 -> 0x3F82; 65504 -> 0x4780; 1/3 -> 0x3EAB.
  EXPECT_EQ(encode_bfloat16(1.00390625f), 0x3F80);
  EXPECT_EQ(encode_bfloat16(1.01171875f), 0x3F82);
  EXPECT_EQ(encode_bfloat16(65504.0f), 0x4780);
  EXPECT_EQ(encode_bfloat16(1.0f / 3.0f), 0x3EAB);
  // NaN keeps its sign and payload, with the quiet bit set; overflow goes to Inf.
  EXPECT_EQ(encode_bfloat16(from_bits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(encode_bfloat16(from_bits(0xFFA50000u)), 0xFFE5);
  EXPECT_EQ(encode_bfloat16(from_bits(0x7F7FFFFFu)), 0x7F80);
  EXPECT_EQ(encode_bfloat16(-0.0f), 0x8000);
}

TEST(FormatsSpecExamples, Float8E4M3Fn) {
  // 17 -> 0x58 (16, tie to even); 19 -> 0x5A (20); 1.5*2^-9 -> 0x02; 0.75*2^-9 -> 0x01;
  // -300 -> 0xF9 (-288); -0 -> 0x80.
  EXPECT_EQ(encode_float8_e4m3fn(17.0f), 0x58);
  EXPECT_EQ(decode_float8_e4m3fn(0x58), 16.0f);
  EXPECT_EQ(encode_float8_e4m3fn(19.0f), 0x5A);
  EXPECT_EQ(decode_float8_e4m3fn(0x5A), 20.0f);
  EXPECT_EQ(encode_float8_e4m3fn(1.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(encode_float8_e4m3fn(0.75f * std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(encode_float8_e4m3fn(-300.0f), 0xF9);
  EXPECT_EQ(decode_float8_e4m3fn(0xF9), -288.0f);
  EXPECT_EQ(encode_float8_e4m3fn(-0.0f), 0x80);
  // The clamp KvCompressEpilog applies keeps 448 finite; past the 464 midpoint it is NaN.
  EXPECT_EQ(encode_float8_e4m3fn(448.0f), 0x7E);
  EXPECT_EQ(encode_float8_e4m3fn(464.0f), 0x7E);
  EXPECT_EQ(encode_float8_e4m3fn(std::nextafter(464.0f, 500.0f)), 0x7F);
  EXPECT_EQ(encode_float8_e4m3fn(-INFINITY), 0xFF);
  EXPECT_EQ(encode_float8_e4m3fn(-1e-30f), 0x80);  // sign of zero kept
}

TEST(FormatsSpecExamples, Float8E5M2) {
  // Max 57344 (0x7B). Inf = 0x7C/0xFC. NaN = 0x7D-0x7F and 0xFD-0xFF. Subnormal step 2^-16.
  EXPECT_EQ(encode_float8_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(encode_float8_e5m2(61440.0f), 0x7C);  // tie with the next binade -> even (Inf)
  EXPECT_EQ(encode_float8_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(encode_float8_e5m2(-INFINITY), 0xFC);
  EXPECT_EQ(encode_float8_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(encode_float8_e5m2(std::ldexp(1.0f, -17)), 0x00);  // tie -> even 0
  EXPECT_EQ(encode_float8_e5m2(-NAN), 0xFE);
}

TEST(FormatsSpecExamples, Float8E8M0) {
  // kv_compress_epilog's mode-1 examples store ceil(log2 s) + 127 of exact powers of two: amax 1 ->
  // 0x77 (2^-8); amax 448 -> 0x7F; amax 449 -> 0x80; all-zero group -> 0x69 (2^-22). The
  // scale arithmetic belongs to KvCompressEpilog; here the encoder must reproduce the bytes
  // of those powers of two.
  EXPECT_EQ(encode_float8_e8m0(std::ldexp(1.0f, -8)), 0x77);
  EXPECT_EQ(encode_float8_e8m0(1.0f), 0x7F);
  EXPECT_EQ(encode_float8_e8m0(2.0f), 0x80);  // OCP doc example: scale byte 0x80 = 2
  EXPECT_EQ(encode_float8_e8m0(std::ldexp(1.0f, -22)), 0x69);
  // No sign, zero or Inf: those give NaN (0xFF), as ml_dtypes.float8_e8m0fnu does.
  EXPECT_EQ(encode_float8_e8m0(0.0f), 0xFF);
  EXPECT_EQ(encode_float8_e8m0(-1.0f), 0xFF);
  EXPECT_EQ(encode_float8_e8m0(INFINITY), 0xFF);
  // Rounding on the linear scale, ties up: 1.5 -> 2, 0.75 -> 1, just below 1.5 -> 1.
  EXPECT_EQ(encode_float8_e8m0(1.5f), 0x80);
  EXPECT_EQ(encode_float8_e8m0(0.75f), 0x7F);
  EXPECT_EQ(encode_float8_e8m0(std::nextafter(1.5f, 0.0f)), 0x7F);
  EXPECT_EQ(encode_float8_e8m0(from_bits(0x7F3FFFFFu)), 0xFE);
  EXPECT_EQ(encode_float8_e8m0(from_bits(0x7F400000u)), 0xFF);  // rounds to 2^128
}

TEST(FormatsSpecExamples, Float4E2M1) {
  // Midpoints 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4; -0.1 -> 0x8.
  EXPECT_EQ(encode_float4_e2m1(0.25f), 0x0);
  EXPECT_EQ(encode_float4_e2m1(0.75f), 0x2);
  EXPECT_EQ(encode_float4_e2m1(1.25f), 0x2);
  EXPECT_EQ(encode_float4_e2m1(1.75f), 0x4);
  EXPECT_EQ(encode_float4_e2m1(2.5f), 0x4);
  EXPECT_EQ(encode_float4_e2m1(3.5f), 0x6);
  EXPECT_EQ(encode_float4_e2m1(5.0f), 0x6);
  EXPECT_EQ(encode_float4_e2m1(-0.1f), 0x8);
  // Saturation (what the [-6, 6] clamp gives): everything past 6 is 6.
  EXPECT_EQ(encode_float4_e2m1(7.0f), 0x7);
  EXPECT_EQ(encode_float4_e2m1(-1e30f), 0xF);
  EXPECT_EQ(encode_float4_e2m1(-INFINITY), 0xF);
}

TEST(FormatsSpecExamples, HiFloat8) {
  struct Example {
    float input;
    std::uint8_t code;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Example examples[] = {
      {1.0f, 0x08},
      {1.0625f, 0x09},
      {0.9375f, 0x1F},
      {7.5f, 0x27},
      {15.5f, 0x40},
      {-2.5f, 0x92},
      {3.0f, 0x14},
      {100.0f, 0x4A},
      {1000.0f, 0x64},
      {30000.0f, 0x6E},
      {40000.0f, 0x6E},
      {1e30f, 0x6E},
      {1.5f * std::ldexp(1.0f, -16), 0x7E},
      {std::ldexp(1.0f, -23), 0x01},
      {0.9f * std::ldexp(1.0f, -23), 0x00},
      {-1e-9f, 0x00},
      {0.1f, 0x52},
      {-0.3f, 0xB2},
      {nan, 0x00},
      {INFINITY, 0x6E},
  };
  for (const Example& ex : examples) {
    EXPECT_EQ(encode_hifloat8(ex.input, true), ex.code) << ex.input;
    EXPECT_EQ(encode_hifloat8(ex.input), ex.code) << "default is saturating: " << ex.input;
  }
  // Values the table names next to the codes.
  EXPECT_EQ(decode_hifloat8(0x09), 1.125f);
  EXPECT_EQ(decode_hifloat8(0x40), 16.0f);
  EXPECT_EQ(decode_hifloat8(0x4A), 96.0f);
  EXPECT_EQ(decode_hifloat8(0x64), 1024.0f);
  EXPECT_EQ(decode_hifloat8(0x7E), std::ldexp(1.0f, -15));
  EXPECT_EQ(decode_hifloat8(0x52), 0.09375f);
  EXPECT_EQ(decode_hifloat8(0xB2), -0.3125f);
  // Without SAT: overflow -> +-Inf, NaN -> 0x80.
  EXPECT_EQ(encode_hifloat8(40000.0f, false), 0x6E);  // below the 40960 threshold: 2^15
  EXPECT_EQ(encode_hifloat8(41000.0f, false), 0x6F);
  EXPECT_EQ(encode_hifloat8(-41000.0f, false), 0xEF);
  EXPECT_EQ(encode_hifloat8(-INFINITY, false), 0xEF);
  EXPECT_EQ(encode_hifloat8(nan, false), 0x80);
  EXPECT_EQ(encode_hifloat8(-INFINITY, true), 0xEE);
  // 1.25 * 2^15 is the overflow threshold; just below it rounds to 2^15.
  EXPECT_EQ(encode_hifloat8(40960.0f, false), 0x6F);
  EXPECT_EQ(encode_hifloat8(std::nextafter(40960.0f, 0.0f), false), 0x6E);
}

// ---- encode vs the independent formulation --------------------------------------------------

class FormatsEncodeSweep : public ::testing::TestWithParam<std::string> {};

TEST_P(FormatsEncodeSweep, ExponentsAndRoundingBoundaries) {
  const Format& f = format(GetParam());
  const std::vector<float> inputs = sweep_inputs(f.ref);
  expect_matches_reference(f, inputs);
  // Special values.
  expect_matches_reference(
      f, {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, from_bits(0x7F800001u),
          from_bits(0xFF800001u), from_bits(0x7FFFFFFFu), from_bits(0x7FA00000u),
          std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()});
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FormatsEncodeSweep,
                         ::testing::Values("bfloat16", "float16", "float8_e4m3fn",
                                           "float8_e5m2", "float8_e8m0", "float4_e2m1",
                                           "hifloat8_sat", "hifloat8_nosat"),
                         [](const auto& param_info) { return param_info.param; });

// Every float32 bit pattern, both signs per magnitude, split over the available cores.
class FormatsEncodeExhaustive : public ::testing::TestWithParam<std::string> {};

TEST_P(FormatsEncodeExhaustive, EveryFloat32) {
  const Format& f = format(GetParam());
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  constexpr std::uint64_t kMagnitudes = 0x80000000ull;
  std::atomic<std::uint64_t> mismatches{0};
  std::atomic<std::uint64_t> first_bad{~0ull};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::uint64_t begin = kMagnitudes * t / threads;
      const std::uint64_t end = kMagnitudes * (t + 1) / threads;
      std::size_t hint = 0;
      std::uint64_t bad = 0;
      for (std::uint64_t a = begin; a < end; ++a) {
        const float pos = from_bits(static_cast<std::uint32_t>(a));
        const float neg = from_bits(static_cast<std::uint32_t>(a) | 0x80000000u);
        const bool ok = f.encode(pos) == f.ref.expected(pos, &hint) &&
                        f.encode(neg) == f.ref.expected(neg, &hint);
        if (!ok) {
          ++bad;
          std::uint64_t expected = ~0ull;
          first_bad.compare_exchange_strong(expected, a);
        }
      }
      mismatches += bad;
    });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(mismatches.load(), 0u) << f.name << ", first mismatching magnitude "
                                   << hex(static_cast<std::uint32_t>(first_bad.load()));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FormatsEncodeExhaustive,
                         ::testing::Values("bfloat16", "float16", "float8_e4m3fn",
                                           "float8_e5m2", "float8_e8m0", "float4_e2m1",
                                           "hifloat8_sat", "hifloat8_nosat"),
                         [](const auto& param_info) { return param_info.param; });

// ---- batch conversions vs scalar, on every compiled target ------------------------------------

using kvscatter::simd_test::PinTarget;

std::vector<float> special_floats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY,
                          65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, -1e30f,
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  for (std::uint32_t b : {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu,
                          0xFFFFFFFFu, 0x7FA00000u, 0x7F802000u, 0x7F801FFFu, 0x7F7FFFFFu,
                          0x7F7F8000u, 0x7F7F7FFFu, 0x3F808000u, 0x3F818000u, 0x387FFFFFu,
                          0x38800000u, 0x33000000u, 0x33000001u, 0xB3000000u, 0x337FFFFFu,
                          0x477FEFFFu, 0x477FF000u, 0x00400000u, 0x80000001u}) {
    v.push_back(from_bits(b));
  }
  return v;
}

void expect_batch_encode(const std::vector<float>& in, const char* what) {
  std::vector<std::uint16_t> bf(in.size()), h(in.size());
  float32_to_bfloat16(in.data(), bf.data(), in.size());
  float32_to_float16(in.data(), h.data(), in.size());
  int failures = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (bf[i] != encode_bfloat16(in[i]) && ++failures <= 10) {
      ADD_FAILURE() << what << ": float32_to_bfloat16 " << hex(bits(in[i])) << " -> "
                    << hex(bf[i]) << ", scalar " << hex(encode_bfloat16(in[i]));
    }
    if (h[i] != encode_float16(in[i]) && ++failures <= 10) {
      ADD_FAILURE() << what << ": float32_to_float16 " << hex(bits(in[i])) << " -> "
                    << hex(h[i]) << ", scalar " << hex(encode_float16(in[i]));
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

TEST(FormatsBatch, MatchesScalarOnEveryTarget) {
  std::vector<std::uint16_t> all_codes(0x10000);
  for (std::uint32_t c = 0; c < 0x10000; ++c) all_codes[c] = static_cast<std::uint16_t>(c);
  std::vector<float> randoms(100000);
  std::mt19937 rng(7);
  for (float& x : randoms) x = from_bits(static_cast<std::uint32_t>(rng()));
  std::vector<float> sweep = sweep_inputs(format("bfloat16").ref);
  const std::vector<float> sweep16 = sweep_inputs(format("float16").ref);
  sweep.insert(sweep.end(), sweep16.begin(), sweep16.end());

  for (std::int64_t target : simd_test::simd_targets()) {
    SCOPED_TRACE(simd_test::target_name(target));
    PinTarget pin(target);
    ASSERT_EQ(detail::batch_dispatch_target(), target & ~simd_test::kNoVbmi);

    expect_batch_encode(special_floats(), "specials");
    expect_batch_encode(randoms, "random bit patterns");
    expect_batch_encode(sweep, "rounding boundaries");

    // Decode of every code.
    std::vector<float> out(0x10000);
    bfloat16_to_float32(all_codes.data(), out.data(), out.size());
    for (std::uint32_t c = 0; c < 0x10000; ++c) {
      ASSERT_EQ(bits(out[c]), bits(decode_bfloat16(all_codes[c]))) << hex(c);
    }
    float16_to_float32(all_codes.data(), out.data(), out.size());
    for (std::uint32_t c = 0; c < 0x10000; ++c) {
      ASSERT_EQ(bits(out[c]), bits(decode_float16(all_codes[c]))) << hex(c);
    }
  }
}

// Lengths 0..130 at element offsets 0..3; elements outside [offset, offset + n) stay untouched.
TEST(FormatsBatch, LengthsAndUnalignedPointersOnEveryTarget) {
  constexpr std::size_t kMax = 130;
  constexpr std::size_t kPad = 8;
  std::mt19937 rng(99);
  std::vector<float> src(kMax + kPad);
  const std::vector<float> specials = special_floats();
  for (std::size_t i = 0; i < src.size(); ++i) {
    src[i] = (i % 3 == 0) ? specials[i % specials.size()]
                          : from_bits(static_cast<std::uint32_t>(rng()));
  }
  std::vector<std::uint16_t> codes(kMax + kPad);
  for (std::uint16_t& c : codes) c = static_cast<std::uint16_t>(rng());

  for (std::int64_t target : simd_test::simd_targets()) {
    SCOPED_TRACE(simd_test::target_name(target));
    PinTarget pin(target);
    ASSERT_EQ(detail::batch_dispatch_target(), target & ~simd_test::kNoVbmi);
    for (std::size_t off = 0; off < 4; ++off) {
      for (std::size_t n = 0; n <= kMax; ++n) {
        std::vector<std::uint16_t> bf(kMax + kPad, 0xABCD), h(kMax + kPad, 0xABCD);
        float32_to_bfloat16(src.data() + off, bf.data() + off, n);
        float32_to_float16(src.data() + off, h.data() + off, n);
        std::vector<float> fb(kMax + kPad, -7.0f), fh(kMax + kPad, -7.0f);
        bfloat16_to_float32(codes.data() + off, fb.data() + off, n);
        float16_to_float32(codes.data() + off, fh.data() + off, n);
        for (std::size_t i = 0; i < kMax + kPad; ++i) {
          const bool inside = i >= off && i < off + n;
          SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off) +
                       " i=" + std::to_string(i));
          ASSERT_EQ(bf[i], inside ? encode_bfloat16(src[i]) : 0xABCD);
          ASSERT_EQ(h[i], inside ? encode_float16(src[i]) : 0xABCD);
          ASSERT_EQ(bits(fb[i]), bits(inside ? decode_bfloat16(codes[i]) : -7.0f));
          ASSERT_EQ(bits(fh[i]), bits(inside ? decode_float16(codes[i]) : -7.0f));
        }
      }
    }
  }
}

// Every float32 pattern through the batch encoders on every target, against the scalar ones.
TEST(FormatsBatchExhaustive, EveryFloat32OnEveryTarget) {
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<float> in(kChunk);
  std::vector<std::uint16_t> bf(kChunk), h(kChunk);
  for (std::int64_t target : simd_test::simd_targets()) {
    SCOPED_TRACE(simd_test::target_name(target));
    PinTarget pin(target);
    ASSERT_EQ(detail::batch_dispatch_target(), target & ~simd_test::kNoVbmi);
    std::uint64_t mismatches = 0;
    for (std::uint64_t base = 0; base < (1ull << 32); base += kChunk) {
      for (std::size_t i = 0; i < kChunk; ++i) in[i] = from_bits(static_cast<std::uint32_t>(base + i));
      float32_to_bfloat16(in.data(), bf.data(), kChunk);
      float32_to_float16(in.data(), h.data(), kChunk);
      for (std::size_t i = 0; i < kChunk; ++i) {
        mismatches += bf[i] != encode_bfloat16(in[i]);
        mismatches += h[i] != encode_float16(in[i]);
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }
}


// The saturating conversions of GPU fp8 KV caches: the table of the paged_kv_write docs.
TEST(FormatsSatfinite, Float8Table) {
  struct Row {
    float q;
    std::uint8_t e4m3, e5m2;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Row rows[] = {
      {1.0f, 0x38, 0x3C},
      {0.1f, 0x1D, 0x2E},
      {17.0f, 0x58, 0x4C},
      {448.0f, 0x7E, 0x5F},
      {464.0f, 0x7E, 0x5F},
      {57344.0f, 0x7E, 0x7B},
      {1e6f, 0x7E, 0x7B},
      {61440.0f, 0x7E, 0x7B},
      {-0.0f, 0x80, 0x80},
      {-1e-30f, 0x80, 0x80},
      {std::ldexp(1.0f, -10), 0x00, 0x14},
      {1.5f * std::ldexp(1.0f, -10), 0x01, 0x16},
      {-inf, 0xFE, 0xFB},
      {inf, 0x7E, 0x7B},
      {-1e6f, 0xFE, 0xFB},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(encode_float8_e4m3fn_satfinite(r.q), r.e4m3) << r.q;
    EXPECT_EQ(encode_float8_e5m2_satfinite(r.q), r.e5m2) << r.q;
  }
  for (std::uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u}) {
    const float x = std::bit_cast<float>(nan);
    EXPECT_EQ(encode_float8_e4m3fn_satfinite(x), 0x7F);
    EXPECT_EQ(encode_float8_e5m2_satfinite(x), 0x7F);
  }
}

// Inside the finite range the saturating conversions agree with the plain ones.
TEST(FormatsSatfinite, AgreeWithPlainEncodersInRange) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(x)) continue;
    if (std::fabs(x) <= 448.0f) {
      EXPECT_EQ(encode_float8_e4m3fn_satfinite(x), encode_float8_e4m3fn(x)) << x;
    }
    if (std::fabs(x) <= 57344.0f) {
      EXPECT_EQ(encode_float8_e5m2_satfinite(x), encode_float8_e5m2(x)) << x;
    }
  }
}

}  // namespace
}  // namespace kvscatter::formats
