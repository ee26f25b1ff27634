#include "voxfit/sweep/point_result.h"

namespace voxfit::sweep {

using nlohmann::json;

std::uint64_t PointResult::usable_bytes() const {
  return budget_report.is_object() ? budget_report.value("usable_bytes", std::uint64_t{0}) : 0;
}

const ThroughputRow* PointResult::throughput_at(std::int64_t batch) const {
  for (const auto& t : throughput)
    if (t.batch == batch) return &t;
  return nullptr;
}

json PointResult::to_json() const {
  json j = {{"key", key},      {"model", model}, {"patch", patch}, {"precision", precision}, {"checkpoint", checkpoint},
            {"budget", budget}};
  if (!skipped.empty()) {
    j["skipped"] = skipped;
    return j;
  }
  json probes_json = json::array(), rows = json::array();
  for (const auto& p : probe_log) probes_json.push_back(sweep::to_json(p));
  for (const auto& t : throughput)
    rows.push_back({{"batch", t.batch},
                    {"samples_per_s", t.samples_per_s},
                    {"voxels_per_s", t.voxels_per_s},
                    {"peak_allocated_bytes", t.peak_allocated_bytes},
                    {"peak_reserved_bytes", t.peak_reserved_bytes}});
  j.update({{"attention", attention},
            {"channels_last", channels_last},
            {"kernels", kernels},
            {"lean_decoders", lean_decoders},
            {"optimizer", optimizer},
            {"lr", lr},
            {"budget_report", budget_report},
            {"allocator", allocator},
            {"host_allocator", host_allocator},
            {"dataset", dataset},
            {"provenance", provenance},
            {"max_batch", max_batch},
            {"first_failing", first_failing},
            {"predicted", predicted},
            {"probes", probes},
            {"seconds", seconds},
            {"resumed_probes", resumed_probes},
            {"samples_per_s", samples_per_s},
            {"voxels_per_s", voxels_per_s},
            {"knee_batch", knee_batch},
            {"fit", {{"static_bytes", fit.static_bytes}, {"per_sample_bytes", fit.per_sample_bytes}}},
            {"fit_error_at_max", fit_error_at_max},
            {"leaks", leaks},
            {"isolated", isolated},
            {"memory_breakdown", memory_breakdown},
            {"probe_log", probes_json},
            {"throughput", rows}});
  return j;
}

PointResult PointResult::from_json(const json& j) {
  PointResult r;
  r.key = j.value("key", "");
  r.model = j.value("model", "");
  r.patch = j.value("patch", "");
  r.precision = j.value("precision", "");
  r.checkpoint = j.value("checkpoint", "");
  r.budget = j.value("budget", "");
  r.skipped = j.value("skipped", "");
  if (!r.skipped.empty()) return r;
  r.attention = j.value("attention", "");
  r.channels_last = j.value("channels_last", false);
  r.kernels = j.value("kernels", "");
  r.lean_decoders = j.value("lean_decoders", false);
  r.optimizer = j.value("optimizer", "");
  r.lr = j.value("lr", 0.0);
  r.budget_report = j.value("budget_report", json());
  r.allocator = j.value("allocator", json());
  r.host_allocator = j.value("host_allocator", json());
  r.dataset = j.value("dataset", "");
  r.provenance = j.value("provenance", json());
  r.max_batch = j.value("max_batch", std::int64_t{0});
  r.first_failing = j.value("first_failing", std::int64_t{0});
  r.predicted = j.value("predicted", std::int64_t{0});
  r.probes = j.value("probes", 0);
  r.seconds = j.value("seconds", 0.0);
  r.resumed_probes = j.value("resumed_probes", 0);
  r.samples_per_s = j.value("samples_per_s", 0.0);
  r.voxels_per_s = j.value("voxels_per_s", 0.0);
  r.knee_batch = j.value("knee_batch", std::int64_t{0});
  if (j.contains("fit")) {
    r.fit.static_bytes = j.at("fit").value("static_bytes", 0.0);
    r.fit.per_sample_bytes = j.at("fit").value("per_sample_bytes", 0.0);
  }
  r.fit_error_at_max = j.value("fit_error_at_max", 0.0);
  r.leaks = j.value("leaks", 0);
  r.isolated = j.value("isolated", false);
  r.memory_breakdown = j.value("memory_breakdown", json());
  for (const auto& p : j.value("probe_log", json::array())) {
    try {
      r.probe_log.push_back(probe_from_json(p));
    } catch (const json::exception&) {
      // a probe record of a version that wrote other fields: left out of the log
    }
  }
  for (const auto& t : j.value("throughput", json::array()))
    r.throughput.push_back({t.value("batch", std::int64_t{0}), t.value("samples_per_s", 0.0),
                            t.value("voxels_per_s", 0.0), t.value("peak_allocated_bytes", std::uint64_t{0}),
                            t.value("peak_reserved_bytes", std::uint64_t{0})});
  return r;
}

}  // namespace voxfit::sweep
