#include "voxfit/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "voxfit/core/error.h"

namespace voxfit {

std::uint64_t parse_bytes(const std::string& text, const std::string& what) {
  static const std::map<std::string, double> kUnits = {{"", 1.0},
                                                       {"b", 1.0},
                                                       {"k", 1024.0},
                                                       {"kib", 1024.0},
                                                       {"kb", 1e3},
                                                       {"m", 1024.0 * 1024},
                                                       {"mib", 1024.0 * 1024},
                                                       {"mb", 1e6},
                                                       {"g", double(kGiB)},
                                                       {"gib", double(kGiB)},
                                                       {"gb", 1e9},
                                                       {"t", double(kGiB) * 1024},
                                                       {"tib", double(kGiB) * 1024},
                                                       {"tb", 1e12}};
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw ConfigError(what + ": '" + text + "' is not a size (expected e.g. 24GiB, 48GB, 512MiB)");
  }
  std::string unit;
  for (std::size_t i = pos; i < text.size(); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i])))
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  auto it = kUnits.find(unit);
  if (it == kUnits.end())
    throw ConfigError(what + ": unknown unit in '" + text + "' (expected B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
  if (!std::isfinite(value) || value <= 0) throw ConfigError(what + ": '" + text + "' must be a positive size");
  const double bytes = value * it->second;
  if (bytes > 1.8e19) throw ConfigError(what + ": '" + text + "' is too large");
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::optional<std::vector<std::int64_t>> parse_shape_text(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find('x', begin);
    const auto v = to_integer(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (!v) return std::nullopt;
    dims.push_back(*v);
    if (end == std::string::npos) return dims;
    begin = end + 1;
  }
}

std::optional<std::int64_t> to_integer(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<double> to_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) return "?";
  const auto s = static_cast<long long>(std::llround(seconds));
  char b[32];
  if (s < 60)
    std::snprintf(b, sizeof b, "%llds", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(b, sizeof b, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return b;
}

std::string format_bytes(std::uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024.0 && i < 4) {
    v /= 1024.0;
    ++i;
  }
  char buf[64];
  if (i == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[i]);
  return buf;
}

}  // namespace voxfit
