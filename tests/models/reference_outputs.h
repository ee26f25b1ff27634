#pragma once
// The closed-formula weights and input of tests/models/reference/make_*.py, and their reference
// outputs: a network filled by the same formula, by parameter name, must give the same outputs as
// the reference implementation did.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace voxfit::test {

inline std::vector<int64_t> ints(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

inline std::filesystem::path reference_dir() { return source_dir() / "tests" / "models" / "reference"; }

/// make_resenc_unet.py's fill(): a parameter of `name` (float64, then float32).
inline torch::Tensor formula(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t h = 0;
  for (size_t j = 0; j < name.size(); ++j) h += static_cast<int64_t>(j + 1) * static_cast<unsigned char>(name[j]);
  const double phase = static_cast<double>(h % 997) / 997.0 * 2.0 * M_PI;
  int64_t n = 1;
  for (const auto s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  const bool norm_weight = name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
  for (int64_t i = 0; i < n; ++i) {
    const double s = std::sin(0.7 * static_cast<double>(i) + phase);
    double x;
    if (shape.size() == 1)
      x = norm_weight ? 1.0 + 0.2 * s : 0.1 * s;
    else
      x = s * std::sqrt(3.0 / static_cast<double>(n / shape[0]));
    v[static_cast<size_t>(i)] = static_cast<float>(x);
  }
  return torch::from_blob(v.data(), shape, torch::kFloat).clone();
}

/// The scripts' input: sin(0.013 i) over the flat index.
inline torch::Tensor input_formula(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const auto s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.013 * static_cast<double>(i)));
  return torch::from_blob(v.data(), shape, torch::kFloat).clone();
}

/// Fills every parameter of `net` by the formula.
inline void fill_by_formula(torch::nn::Module& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net.named_parameters()) p.value().copy_(formula(p.key(), p.value().sizes().vec()));
}

/// A reference file pair (STEM.json manifest, STEM.bin float32 outputs) of tests/models/reference.
struct ReferenceOutputs {
  nlohmann::json manifest;
  std::string bytes;
  explicit ReferenceOutputs(const std::string& stem) {
    std::ifstream in(reference_dir() / (stem + ".json"));
    manifest = nlohmann::json::parse(in);
    std::ifstream blob(reference_dir() / (stem + ".bin"), std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(blob)), std::istreambuf_iterator<char>());
  }
  torch::Tensor output(const std::string& name) const {
    for (const auto& e : manifest.at("outputs"))
      if (e.at("name") == name)
        return torch::from_blob(const_cast<char*>(bytes.data()) + e.at("offset").get<size_t>(),
                                e.at("shape").get<std::vector<int64_t>>(), torch::kFloat)
            .clone();
    ADD_FAILURE() << "no output " << name;
    return torch::Tensor();
  }
  /// Each of `outs` equals the reference's PREFIX0, PREFIX1, ... within 1e-4 of its largest value.
  void expect_equal(const std::vector<torch::Tensor>& outs, const std::string& prefix, size_t expected) const {
    ASSERT_EQ(outs.size(), expected) << prefix;
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto ref = output(prefix + std::to_string(i));
      ASSERT_EQ(outs[i].sizes(), ref.sizes()) << prefix << i;
      const double scale = ref.abs().max().item<double>();
      EXPECT_LE((outs[i] - ref).abs().max().item<double>(), 1e-4 * scale)
          << prefix << i << " (largest " << scale << ")";
    }
  }
};

}  // namespace voxfit::test
