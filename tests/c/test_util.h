/* A minimal test harness for the C ABI tests (plain C11): CHECK records a failure and keeps
 * going, RUN_TEST runs one test function, and TEST_SUMMARY prints "N passed, M failed" and
 * gives the exit status. */
#ifndef KVSCATTER_TESTS_C_TEST_UTIL_H_
#define KVSCATTER_TESTS_C_TEST_UTIL_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvscatter/kvscatter.h"

static int g_tests_passed = 0;
static int g_tests_failed = 0;
static int g_current_failed = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_current_failed = 1;                                                    \
    }                                                                          \
  } while (0)

/* Checks a status code; on a mismatch prints both codes and the last error message. */
#define CHECK_STATUS(expr, expected)                                                               \
  do {                                                                                             \
    kvsStatus check_status_got_ = (expr);                                                          \
    if (check_status_got_ != (expected)) {                                                         \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d (last error: %s)\n", __FILE__, __LINE__, \
              #expr, (int)check_status_got_, (int)(expected), kvsGetLastErrorMessage());           \
      g_current_failed = 1;                                                                        \
    }                                                                                              \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, KVS_SUCCESS)

/* Checks that the last error message contains `needle`. */
#define CHECK_MESSAGE_HAS(needle)                                                               \
  do {                                                                                          \
    const char* check_message_ = kvsGetLastErrorMessage();                                      \
    if (check_message_ == NULL || strstr(check_message_, (needle)) == NULL) {                   \
      fprintf(stderr, "%s:%d: last error \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, \
              check_message_ ? check_message_ : "(null)", (needle));                            \
      g_current_failed = 1;                                                                     \
    }                                                                                           \
  } while (0)

#define RUN_TEST(fn)                       \
  do {                                     \
    g_current_failed = 0;                  \
    fn();                                  \
    if (g_current_failed) {                \
      ++g_tests_failed;                    \
      fprintf(stderr, "FAILED %s\n", #fn); \
    } else {                               \
      ++g_tests_passed;                    \
      printf("ok     %s\n", #fn);          \
    }                                      \
  } while (0)

#define TEST_SUMMARY()                                               \
  (printf("%d passed, %d failed\n", g_tests_passed, g_tests_failed), \
   g_tests_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE)

/* Creates a tensor descriptor that must succeed (contiguous when strides is NULL). */
static inline kvsTensor* make_tensor(void* data, kvsDataType dtype, int64_t rank,
                                     const int64_t* shape, const int64_t* strides) {
  kvsTensor* t = NULL;
  kvsStatus s = kvsCreateTensor(data, dtype, rank, shape, strides, &t);
  if (s != KVS_SUCCESS) {
    fprintf(stderr, "kvsCreateTensor failed (%d): %s\n", (int)s, kvsGetLastErrorMessage());
    abort();
  }
  return t;
}

#endif /* KVSCATTER_TESTS_C_TEST_UTIL_H_ */
