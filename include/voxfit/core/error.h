#pragma once
// The one exception family of voxfit. Messages name the file or field and what was expected;
// `main` prints what() as one line on stderr and exits with exit_code().
#include <stdexcept>
#include <string>

namespace voxfit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  /// Process exit status for this error: 1 for failures of the work, 2 for bad usage.
  virtual int exit_code() const noexcept { return 1; }
};

/// A bad command line, option value or configuration file (exit status 2).
class ConfigError : public Error {
 public:
  using Error::Error;
  int exit_code() const noexcept override { return 2; }
};

/// A file that cannot be read or written, or whose content is malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A dataset whose content breaks a rule (grids, labels, intensities).
class DataError : public Error {
 public:
  using Error::Error;
};

/// A network asked for an input or setting it cannot handle.
class ModelError : public Error {
 public:
  using Error::Error;
};

/// A memory budget that cannot hold what was asked of it.
class BudgetError : public Error {
 public:
  using Error::Error;
};

/// A capability that this build does not have (e.g. CUDA on a CPU-only LibTorch).
class UnsupportedError : public Error {
 public:
  using Error::Error;
  int exit_code() const noexcept override { return 2; }
};

/// Whether `what` is an error the TorchScript interpreter rethrew (a scripted network's forward or
/// backward): its first line says only that an operation failed, its traceback follows.
bool is_script_error(const std::string& what);
/// Whether an error message reports a failed allocation: the caching allocator's "out of memory",
/// cuBLAS / cuDNN handles and workspaces made outside it, the default CPU allocator.
bool reports_allocation_failure(const std::string& message);
/// The line of an error message that says what went wrong: the last "SomethingError: ..." line of
/// TorchScript's traceback (Python's "builtins." dropped), before any C++ backtrace ("Exception
/// raised from ..."); else its last line.
std::string error_line(const std::string& what);

}  // namespace voxfit
