#pragma once
// Where voxfit finds its own files (the card table, the reference benchmark results): beside an
// installed binary, or in the source tree it was built from.
#include <filesystem>

namespace voxfit {

/// This process's executable (/proc/self/exe); empty where it cannot be read.
std::filesystem::path executable_path();

/// voxfit's data folder (cards.csv, reference/), the first of: $VOXFIT_DATA_DIR when set and not
/// empty; <executable>/../share/voxfit when it holds cards.csv (an installed voxfit:
/// `cmake --install`); the source tree's data/ this binary was built from.
std::filesystem::path data_dir();

/// The card table (data_dir()/cards.csv) and the published reference numbers
/// (data_dir()/reference/autodl_seed.csv), each named here only.
std::filesystem::path card_table_path();
std::filesystem::path reference_table_path();

}  // namespace voxfit
