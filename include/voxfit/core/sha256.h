#pragma once
// SHA-256 (FIPS 180-4), for naming a file's exact content (the TorchScript file a run trained).
#include <filesystem>
#include <string>
#include <string_view>

namespace voxfit::core {

/// The SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
/// The SHA-256 of the file's bytes; throws IoError naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& file);

}  // namespace voxfit::core
