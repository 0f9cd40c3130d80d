// The one string builder of the library: every error message is assembled with cat().
#pragma once

#include <sstream>
#include <string>

namespace kvscatter::detail {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

}  // namespace kvscatter::detail
