#pragma once
// What every voxfit fuzz target shares: a private scratch folder, writing the input to a file in
// it (voxfit's readers take paths), and the rule that only voxfit::Error may escape a reader.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace voxfit::fuzz {

/// A folder of this process under the temp dir (removed at exit).
const std::filesystem::path& scratch_dir();

/// Writes the fuzz input to scratch_dir()/name and returns its path.
std::filesystem::path write_input(const std::string& name, const std::uint8_t* data, std::size_t size);

}  // namespace voxfit::fuzz
