#include "voxfit/core/error.h"

#include <algorithm>
#include <iterator>
#include <regex>
#include <sstream>

namespace voxfit {

bool is_script_error(const std::string& what) {
  return what.rfind("The following operation failed in the TorchScript interpreter", 0) == 0;
}

bool reports_allocation_failure(const std::string& message) {
  static constexpr const char* kPhrases[] = {"out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                                             "not enough memory", "can't allocate memory"};
  return std::any_of(std::begin(kPhrases), std::end(kPhrases),
                     [&](const char* phrase) { return message.find(phrase) != std::string::npos; });
}

std::string error_line(const std::string& what) {
  std::istringstream lines(what);
  std::string line, named, last;
  static const std::regex kNamed(R"(^\s*[A-Za-z_.]*(Error|Exception): .*)");
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line.rfind("Exception raised from", 0) == 0) break;  // LibTorch's C++ backtrace follows
    last = line;
    if (std::regex_match(line, kNamed)) named = line;
  }
  std::string out = named.empty() ? last : named;
  out = out.substr(std::min(out.size(), out.find_first_not_of(" \t")));
  if (out.rfind("builtins.", 0) == 0) out = out.substr(9);  // Python's own exceptions, as Python prints them
  return out.empty() ? std::string("(no message)") : out;
}

}  // namespace voxfit
