// Errors: a status code (the numbers of the C ABI, include/kvscatter/kvscatter.h) plus a message
// that names the argument, what was expected and what was found.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kvscatter/export.h"

namespace kvscatter {

enum class Status : std::int32_t {
  ok = 0,
  null_pointer = 161001,
  invalid_parameter = 161002,
  internal_error = 561000,
};

class KVSCATTER_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message);
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace kvscatter
