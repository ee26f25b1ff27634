#pragma once
// Byte quantities as people write them: "24GiB", "48 GB", "512MiB", "1.5G" (G = GiB), plain bytes.
#include <cstdint>
#include <string>

namespace voxfit {

/// Parses a byte size. Decimal suffixes (kB, MB, GB, TB) are powers of 1000, binary ones
/// (KiB, MiB, GiB, TiB, and the bare K, M, G, T) powers of 1024. Throws ConfigError naming `what`.
std::uint64_t parse_bytes(const std::string& text, const std::string& what = "size");

/// "23.45 GiB", "512.00 MiB", "17 B".
std::string format_bytes(std::uint64_t bytes);

/// Bytes as GiB, for tables.
inline double to_gib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

inline constexpr std::uint64_t kGiB = 1024ull * 1024ull * 1024ull;
inline constexpr std::uint64_t kMiB = 1024ull * 1024ull;

}  // namespace voxfit
