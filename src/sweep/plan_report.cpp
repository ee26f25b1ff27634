// voxfit plan's outputs: plan.json, plan.md, plan.svg and an nnU-Net v2 plans file.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/units.h"
#include "voxfit/models/network.h"
#include "voxfit/sweep/plan.h"

namespace voxfit::sweep {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string patch_text(const std::vector<std::int64_t>& p) {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += (i ? "x" : "") + std::to_string(p[i]);
  return s;
}

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string gib(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", static_cast<double>(bytes) / 1073741824.0);
  return b;
}

std::string share(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return b;
}

// "rtx3090" -> "rtx3090"; "24.00 GiB" -> "24_00_GiB": a configuration name nnU-Net can use in paths.
std::string config_suffix(const std::string& label) {
  std::string s;
  for (const char c : label) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

// The ResidualEncoderUNet's arch_kwargs for `patch` as nnU-Net's plans hold them: the registry's
// reference constructor (voxfit export's) without the keys nnU-Net passes itself.
json arch_kwargs(const PlanResult& r, const std::vector<std::int64_t>& patch) {
  const auto& entry = models::find_model(r.model);
  models::ModelContext ctx = entry.defaults;
  ctx.in_channels = static_cast<int>(r.fingerprint.channels);
  ctx.num_classes = static_cast<int>(r.fingerprint.classes);
  ctx.patch = patch;
  std::ostringstream spacing;
  spacing << r.fingerprint.spacing[0] << "," << r.fingerprint.spacing[1] << "," << r.fingerprint.spacing[2];
  const std::map<std::string, std::string> params = {
      {"base_features", std::to_string(r.network.base_features())},
      {"max_features", std::to_string(r.network.max_features())},
      {"blocks_per_stage", list_text(r.network.blocks_per_stage())},
      {"decoder_convs", std::to_string(r.network.decoder_convs())},
      {"spacing", spacing.str()},
      {"deep_supervision", r.network.deep_supervision() ? "true" : "false"}};
  json built = entry.reference->constructor(ctx, params);
  json kwargs = built.at("kwargs");
  for (const char* k : {"input_channels", "num_classes", "deep_supervision"}) kwargs.erase(k);
  return {{"network_class_name", built.at("class")},
          {"arch_kwargs", kwargs},
          {"_kw_requires_import", built.at("_kw_requires_import")}};
}

// A horizontal bar chart: per budget its usable bytes, the peak of voxfit's plan and of nnU-Net's.
std::string plan_svg(const PlanResult& r) {
  double most = 1;
  for (const auto& b : r.budgets) most = std::max(most, static_cast<double>(b.usable_bytes));
  const int row = 54, left = 120, width = 520;
  const auto x = [&](std::uint64_t bytes) {
    return left + static_cast<int>(width * static_cast<double>(bytes) / most);
  };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 40 << "\" height=\""
    << 40 + row * static_cast<int>(r.budgets.size()) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<text x=\"4\" y=\"16\">peak reserved memory of one training step against each budget's usable memory "
       "(outline): voxfit's plan (blue), nnU-Net's (orange)</text>\n";
  int y = 30;
  for (const auto& b : r.budgets) {
    s << "<text x=\"4\" y=\"" << y + 20 << "\">" << b.budget << "</text>\n";
    s << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << x(b.usable_bytes) - left
      << "\" height=\"40\" fill=\"none\" stroke=\"#555\"/>\n";
    if (b.error.empty())
      s << "<rect x=\"" << left << "\" y=\"" << y + 4 << "\" width=\"" << x(b.peak_reserved) - left
        << "\" height=\"14\" fill=\"#3b6fb6\"><title>voxfit: " << patch_text(b.patch) << " batch " << b.batch
        << "</title></rect>\n";
    if (b.nnunet_measured) {
      const auto& m = *b.nnunet_measured;
      if (m.fits)
        s << "<rect x=\"" << left << "\" y=\"" << y + 22 << "\" width=\"" << x(m.peak_reserved) - left
          << "\" height=\"14\" fill=\"#e08a2c\"/>\n";
      else
        s << "<text x=\"" << left + 4 << "\" y=\"" << y + 34
          << "\" fill=\"#c0392b\">nnU-Net's plan: out of memory</text>\n";
    }
    y += row;
  }
  s << "</svg>\n";
  return s.str();
}

std::string plan_md(const PlanResult& r) {
  const auto& f = r.fingerprint;
  std::ostringstream s;
  char line[512];
  s << "# voxfit plan: " << r.dataset << ", " << r.model << ", " << r.precision << " on " << r.device << "\n\n";
  std::snprintf(line, sizeof line,
                "Fingerprint: median case %gx%gx%g voxels (D x H x W) at %g x %g x %g mm, %lld cases, %lld channels, "
                "%lld classes. Network: base %lld, max %lld features, blocks %s. Every plan trains at batch %lld or "
                "more.\n\n",
                f.median_shape[0], f.median_shape[1], f.median_shape[2], f.spacing[0], f.spacing[1], f.spacing[2],
                static_cast<long long>(f.cases), static_cast<long long>(f.channels), static_cast<long long>(f.classes),
                static_cast<long long>(r.network.base_features()), static_cast<long long>(r.network.max_features()),
                list_text(r.network.blocks_per_stage()).c_str(), static_cast<long long>(r.min_batch));
  s << line;
  s << "## voxfit's plans (measured: every patch and batch decided by training steps under the budget)\n\n"
    << "| budget | usable GiB | patch | stages | largest batch | peak reserved GiB | of usable | samples/s | "
       "patches probed (of the order) | probes | seconds |\n"
    << "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& b : r.budgets) {
    if (!b.error.empty()) {
      s << "| " << b.budget << " | " << gib(b.usable_bytes) << " | " << b.error << " | | | | | | "
        << b.candidates.size() << " (" << b.candidates_in_order << ") | " << b.probes << " | | \n";
      continue;
    }
    std::snprintf(line, sizeof line, "| %s | %s | %s | %zu | %lld | %s | %s | %.2f | %zu (%lld) | %d | %.1f |\n",
                  b.budget.c_str(), gib(b.usable_bytes).c_str(), patch_text(b.patch).c_str(), b.topology.stages(),
                  static_cast<long long>(b.batch), gib(b.peak_reserved).c_str(),
                  share(b.peak_reserved, b.usable_bytes).c_str(), b.samples_per_s, b.candidates.size(),
                  static_cast<long long>(b.candidates_in_order), b.probes, b.seconds);
    s << line;
  }
  s << "\n## nnU-Net's plans for the same fingerprint (its ResEnc planners' rules, nnunetv2 2.8.1)\n\n"
    << "| preset | target | patch | stages | batch | feature-map estimate | batch by estimate | batch by dataset |\n"
    << "|---|---:|---|---:|---:|---:|---:|---:|\n";
  for (const auto& p : r.nnunet) {
    const auto& preset = *std::find_if(nnunet_presets().begin(), nnunet_presets().end(),
                                       [&](const NnUNetPreset& q) { return q.name == p.preset; });
    std::snprintf(line, sizeof line, "| ResEnc %s | %g GB | %s | %zu | %lld | %lld (reference %.3g) | %lld | %lld |\n",
                  p.preset.c_str(), preset.target_gb, patch_text(p.patch).c_str(), p.topology.stages(),
                  static_cast<long long>(p.batch), static_cast<long long>(p.estimate), preset.reference,
                  static_cast<long long>(p.batch_by_memory), static_cast<long long>(p.batch_by_dataset));
    s << line;
  }
  s << "\n## nnU-Net's plan for each card, trained under its budget\n\n"
    << "| budget | nnU-Net's preset | patch | batch | trains | peak reserved GiB | of usable |\n"
    << "|---|---|---|---:|---|---:|---:|\n";
  for (const auto& b : r.budgets) {
    if (!b.nnunet || !b.nnunet_measured) {
      s << "| " << b.budget << " | none (below nnU-Net's 8 GB preset) | | | | | |\n";
      continue;
    }
    const auto& m = *b.nnunet_measured;
    s << "| " << b.budget << " | ResEnc " << b.nnunet->preset << " | " << patch_text(b.nnunet->patch) << " | "
      << b.nnunet->batch << " | " << (m.fits ? "yes" : "no: out of memory") << " | "
      << (m.fits ? gib(m.peak_reserved) : "-") << " | " << (m.fits ? share(m.peak_reserved, b.usable_bytes) : "-")
      << " |\n";
  }
  s << "\n![peak memory against each budget](plan.svg)\n\n"
    << "`nnUNetPlans_voxfit.json` holds one nnU-Net v2 configuration per budget (`3d_fullres_<budget>`): copy it\n"
    << "into the dataset's nnUNet_preprocessed folder, then `nnUNetv2_preprocess -d ID -plans_name "
       "nnUNetPlans_voxfit -c 3d_fullres_<budget>`\n"
    << "and `nnUNetv2_train ID 3d_fullres_<budget> FOLD -p nnUNetPlans_voxfit`. `plan.json` holds every probe.\n";
  return s.str();
}

}  // namespace

json nnunet_plans_file(const PlanResult& r, const data::Plan& plan) {
  const auto& f = r.fingerprint;
  json schemes = json::array(), mask = json::array(), intensities = json::object();
  for (size_t c = 0; c < plan.normalisation.size(); ++c) {
    const auto& n = plan.normalisation[c];
    schemes.push_back(n.scheme == data::Normalisation::CT ? "CTNormalization" : "ZScoreNormalization");
    mask.push_back(false);
    if (n.scheme == data::Normalisation::CT)  // what nnU-Net's CTNormalization reads
      intensities[std::to_string(c)] = {
          {"mean", n.mean}, {"std", n.std}, {"percentile_00_5", n.lower}, {"percentile_99_5", n.upper}};
  }
  const json resampling = {{"is_seg", false}, {"order", 3}, {"order_z", 0}, {"force_separate_z", nullptr}};
  json configurations = json::object();
  for (const auto& b : r.budgets) {
    if (!b.error.empty()) continue;
    const std::string name = "3d_fullres_" + config_suffix(b.budget);
    configurations[name] = {
        {"data_identifier", "nnUNetPlans_voxfit_" + name},
        {"preprocessor_name", "DefaultPreprocessor"},
        {"batch_size", b.batch},
        {"patch_size", b.patch},
        {"median_image_size_in_voxels", f.median_shape},
        {"spacing", f.spacing},
        {"normalization_schemes", schemes},
        {"use_mask_for_norm", mask},
        {"resampling_fn_data", "resample_data_or_seg_to_shape"},
        {"resampling_fn_seg", "resample_data_or_seg_to_shape"},
        {"resampling_fn_data_kwargs", resampling},
        {"resampling_fn_seg_kwargs", {{"is_seg", true}, {"order", 1}, {"order_z", 0}, {"force_separate_z", nullptr}}},
        {"resampling_fn_probabilities", "resample_data_or_seg_to_shape"},
        {"resampling_fn_probabilities_kwargs",
         {{"is_seg", false}, {"order", 1}, {"order_z", 0}, {"force_separate_z", nullptr}}},
        {"architecture", arch_kwargs(r, b.patch)},
        {"batch_dice", false}};
  }
  return {{"dataset_name", r.dataset},
          {"plans_name", "nnUNetPlans_voxfit"},
          {"original_median_spacing_after_transp", f.spacing},
          {"original_median_shape_after_transp", f.median_shape},
          {"image_reader_writer", "SimpleITKIO"},
          {"transpose_forward", {0, 1, 2}},
          {"transpose_backward", {0, 1, 2}},
          {"configurations", configurations},
          {"experiment_planner_used", "voxfit plan (measured)"},
          {"label_manager", "LabelManager"},
          {"foreground_intensity_properties_per_channel", intensities}};
}

void write_plan_outputs(const PlanResult& r, const data::Plan& plan, const fs::path& dir) {
  fs::create_directories(dir);
  write_file_atomic(dir / "plan.json", r.to_json().dump(1) + "\n");
  write_file_atomic(dir / "nnUNetPlans_voxfit.json", nnunet_plans_file(r, plan).dump(1) + "\n");
  write_file_atomic(dir / "plan.svg", plan_svg(r));
  write_file_atomic(dir / "plan.md", plan_md(r));
}

}  // namespace voxfit::sweep
