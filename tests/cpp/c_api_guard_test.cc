// The exception firewall of the C ABI: whatever the C++ side throws becomes a status code and
// a per-thread message; nothing propagates.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "c_api/c_api.h"

namespace kvscatter::capi {
namespace {

std::string last() { return kvsGetLastErrorMessage(); }

TEST(CApiGuard, SuccessReturnsZero) {
  int calls = 0;
  EXPECT_EQ(guard("f", [&] { ++calls; }), KVS_SUCCESS);
  EXPECT_EQ(calls, 1);
}

TEST(CApiGuard, ErrorKeepsItsStatusAndMessage) {
  EXPECT_EQ(guard("kvsF", [] { throw Error(Status::invalid_parameter, "x must be 1, got 2"); }),
            KVS_ERROR_INVALID_PARAMETER);
  EXPECT_EQ(last(), "kvsF: x must be 1, got 2");
  EXPECT_EQ(guard("kvsG", [] { throw Error(Status::null_pointer, "key is NULL"); }),
            KVS_ERROR_NULL_POINTER);
  EXPECT_EQ(last(), "kvsG: key is NULL");
}

TEST(CApiGuard, ErrorWithStatusOkIsStillAFailure) {
  EXPECT_EQ(guard("kvsF", [] { throw Error(Status::ok, "odd"); }), KVS_ERROR_INTERNAL);
}

TEST(CApiGuard, BadAllocIsInternal) {
  EXPECT_EQ(guard("kvsF", [] { throw std::bad_alloc(); }), KVS_ERROR_INTERNAL);
  EXPECT_EQ(last(), "kvsF: out of memory");
}

TEST(CApiGuard, OtherExceptionsAreInternal) {
  EXPECT_EQ(guard("kvsF", [] { throw std::logic_error("broken invariant"); }), KVS_ERROR_INTERNAL);
  EXPECT_EQ(last(), "kvsF: internal error: broken invariant");
  EXPECT_EQ(guard("kvsF", [] { throw 42; }), KVS_ERROR_INTERNAL);
  EXPECT_EQ(last(), "kvsF: internal error: unknown exception");
}

TEST(CApiIntPair, AbsentOrExactlyTwo) {
  const std::int64_t v[3] = {6, 7, 8};
  EXPECT_FALSE(int_pair(nullptr, 0, "strides").has_value());
  auto pair = int_pair(v, 2, "strides");
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ((*pair)[0], 6);
  EXPECT_EQ((*pair)[1], 7);
  try {
    int_pair(v, 3, "offsets");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_parameter);
    EXPECT_EQ(std::string(e.what()), "offsets must have 2 entries, got offsets_count = 3");
  }
  try {
    int_pair(nullptr, 2, "strides");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::null_pointer);
    EXPECT_EQ(std::string(e.what()), "strides is NULL but strides_count is 2");
  }
}

}  // namespace
}  // namespace kvscatter::capi
