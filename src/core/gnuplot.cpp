#include "voxfit/core/gnuplot.h"

#include <cstdlib>

namespace voxfit {

namespace fs = std::filesystem;

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

std::string gnuplot_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

GnuplotScript::GnuplotScript(int width, int height) : width_(width), height_(height) {}

std::string GnuplotScript::output(const fs::path& png) {
  outputs_.push_back(std::make_unique<AtomicPath>(png));
  return "set output " + gnuplot_quoted(outputs_.back()->temp().string()) + "\n";
}

std::string GnuplotScript::run(const fs::path& script_file, const std::string& body) {
  if (!gnuplot_available()) return "gnuplot is not installed";
  write_file_atomic(script_file, "set terminal pngcairo size " + std::to_string(width_) + "," +
                                     std::to_string(height_) + " noenhanced\n" + body);
  const std::string cmd = "gnuplot " + gnuplot_quoted(script_file.string()) + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + script_file.filename().string();
  for (auto& out : outputs_) out->commit();
  return "";
}

}  // namespace voxfit
