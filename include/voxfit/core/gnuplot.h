#pragma once
// The one way voxfit draws a picture: a gnuplot script written beside its PNGs, each PNG drawn into
// an AtomicPath temp and put in place only when the whole script ran (a kill or a gnuplot error
// never leaves a half-drawn or stale-named picture; remove_stale_temporaries clears the temps).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "voxfit/core/atomic_file.h"

namespace voxfit {

/// Is gnuplot on PATH?
bool gnuplot_available();

/// `text` as a single-quoted gnuplot string (two quotes stand for one there).
std::string gnuplot_quoted(const std::string& text);

class GnuplotScript {
 public:
  /// The script's terminal: pngcairo of width x height pixels.
  explicit GnuplotScript(int width = 1100, int height = 700);
  /// The `set output` line that draws `png` (into its temp until run() succeeds).
  std::string output(const std::filesystem::path& png);
  /// Writes the terminal line and `body` to `script_file`, runs gnuplot on it and puts every PNG
  /// of output() in place. Returns "" on success, else why not ("gnuplot is not installed",
  /// "gnuplot failed on predictions.gp"); the PNGs then stay as they were.
  std::string run(const std::filesystem::path& script_file, const std::string& body);

 private:
  int width_, height_;
  std::vector<std::unique_ptr<AtomicPath>> outputs_;
};

}  // namespace voxfit
