#pragma once
// Byte quantities as people write them: "24GiB", "48 GB", "512MiB", "1.5G" (G = GiB), plain bytes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace voxfit {

/// Parses a byte size. Decimal suffixes (kB, MB, GB, TB) are powers of 1000, binary ones
/// (KiB, MiB, GiB, TiB, and the bare K, M, G, T) powers of 1024. Throws ConfigError naming `what`.
std::uint64_t parse_bytes(const std::string& text, const std::string& what = "size");

/// "23.45 GiB", "512.00 MiB", "17 B".
std::string format_bytes(std::uint64_t bytes);
/// {96, 96, 64} -> "96x96x64": the one text of a shape (patches, volumes, datasets, journals).
template <typename Dims>
std::string shape_text(const Dims& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}
/// shape_text's inverse ("96x96x64" -> {96, 96, 64}); nullopt unless every part is an integer.
std::optional<std::vector<std::int64_t>> parse_shape_text(const std::string& text);

/// The whole of `text` as an integer / a finite-or-not double (no sign games: "12abc", "", " 1"
/// and out-of-range values give nullopt). The one parser behind every option, manifest and table
/// value; callers add their own message naming the option or file.
std::optional<std::int64_t> to_integer(const std::string& text);
std::optional<double> to_number(const std::string& text);
/// A progress line's time left: "45s", "3m12s", "2h05m" (negative or not finite: "?").
std::string format_duration(double seconds);

/// Bytes as GiB, for tables.
inline double to_gib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

inline constexpr std::uint64_t kGiB = 1024ull * 1024ull * 1024ull;
inline constexpr std::uint64_t kMiB = 1024ull * 1024ull;

}  // namespace voxfit
