#include "voxfit/io/dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::io {

namespace {

using json = nlohmann::json;

bool is_h5_file(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h5" || e == ".hdf5" || e == ".H5";
}

// "case_01.nii.gz" -> "case_01"; a DICOM folder keeps its name.
std::string stem_of(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();
  if (is_volume_file(p)) return name.substr(0, name.size() - volume_extension(p).size());
  if (is_h5_file(p)) return p.stem().string();
  const auto hash = name.find('#');
  return hash == std::string::npos ? name : name.substr(0, hash);
}

json parse_manifest(const fs::path& manifest) {
  std::ifstream in(manifest);
  if (!in) throw IoError(manifest.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(manifest.string() + ": not valid JSON (" + e.what() + ")");
  }
}

fs::path resolve(const fs::path& root, const std::string& entry) {
  const fs::path p(entry);
  return (p.is_absolute() ? p : root / p).lexically_normal();
}

std::vector<std::string> channel_list(const json& j, const char* key, const fs::path& manifest) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  const json& m = j.at(key);
  if (!m.is_object())
    throw ConfigError(manifest.string() + ": '" + key + "' must be an object {\"0\": \"CT\", ...}");
  std::map<int, std::string> byindex;
  for (const auto& [k, v] : m.items()) {
    int index = -1;
    try {
      index = std::stoi(k);
    } catch (const std::exception&) {
    }
    if (index < 0 || !v.is_string())
      throw ConfigError(manifest.string() + ": '" + key + "' entry '" + k +
                        "' must map a channel index to a name");
    byindex[index] = v.get<std::string>();
  }
  int expect = 0;
  for (const auto& [i, name] : byindex) {
    if (i != expect++)
      throw ConfigError(manifest.string() + ": '" + key + "' must number channels 0, 1, 2, ... without gaps");
    out.push_back(name);
  }
  return out;
}

void unique_ids(std::vector<CaseFiles>& cases) {
  std::map<std::string, int> seen;
  for (auto& c : cases) {
    const int n = seen[c.id]++;
    if (n > 0) c.id += "_" + std::to_string(n);
  }
}

Dataset load_msd(const json& j, Dataset d) {
  d.layout = DatasetLayout::Msd;
  d.channel_names = channel_list(j, "modality", d.manifest);
  if (j.contains("labels")) {
    if (!j["labels"].is_object())
      throw ConfigError(d.manifest.string() + ": 'labels' must be an object {\"0\": \"background\", ...}");
    for (const auto& [k, v] : j["labels"].items()) {
      std::int64_t value = 0;
      try {
        std::size_t used = 0;
        value = std::stoll(k, &used);
        if (used != k.size()) throw std::invalid_argument(k);
      } catch (const std::exception&) {
        throw ConfigError(d.manifest.string() + ": 'labels' key '" + k + "' must be an integer label value");
      }
      d.labels[value] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  const json& training = j.at("training");
  if (!training.is_array()) throw ConfigError(d.manifest.string() + ": 'training' must be a list of {image, label}");
  for (std::size_t i = 0; i < training.size(); ++i) {
    const json& e = training[i];
    const std::string where = d.manifest.string() + ": training[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("image"))
      throw ConfigError(where + ": expected an object with 'image' (and 'label')");
    CaseFiles c;
    const json& image = e["image"];
    if (image.is_string()) {
      c.images.push_back(resolve(d.root, image.get<std::string>()));
    } else if (image.is_array() && !image.empty()) {
      for (const auto& s : image) {
        if (!s.is_string()) throw ConfigError(where + ": 'image' list entries must be paths");
        c.images.push_back(resolve(d.root, s.get<std::string>()));
      }
    } else {
      throw ConfigError(where + ": 'image' must be a path or a list of paths");
    }
    if (e.contains("label")) {
      if (!e["label"].is_string()) throw ConfigError(where + ": 'label' must be a path");
      c.label = resolve(d.root, e["label"].get<std::string>());
    }
    c.id = stem_of(c.label ? *c.label : c.images.front());
    d.cases.push_back(std::move(c));
  }
  unique_ids(d.cases);
  return d;
}

Dataset load_nnunet(const json& j, Dataset d) {
  d.layout = DatasetLayout::NnUNetV2;
  d.channel_names = channel_list(j, "channel_names", d.manifest);
  if (d.channel_names.empty())
    throw ConfigError(d.manifest.string() + ": 'channel_names' is required ({\"0\": \"CT\"})");
  if (!j.contains("file_ending") || !j["file_ending"].is_string())
    throw ConfigError(d.manifest.string() + ": 'file_ending' is required (e.g. \".nii.gz\")");
  const std::string ending = j["file_ending"].get<std::string>();
  if (j.contains("labels")) {
    if (!j["labels"].is_object())
      throw ConfigError(d.manifest.string() + ": 'labels' must be an object {\"background\": 0, ...}");
    for (const auto& [name, v] : j["labels"].items()) {
      if (!v.is_number_integer())
        throw ConfigError(d.manifest.string() + ": label '" + name +
                          "' must be one integer value (region-based labels are not supported)");
      d.labels[v.get<std::int64_t>()] = name;
    }
  }
  const fs::path images = d.root / "imagesTr", labels = d.root / "labelsTr";
  const auto ends_with = [&](const std::string& s) {
    return s.size() > ending.size() && s.compare(s.size() - ending.size(), ending.size(), ending) == 0;
  };
  std::set<std::string> ids;
  if (fs::is_directory(labels))
    for (const auto& e : fs::directory_iterator(labels)) {
      const std::string n = e.path().filename().string();
      if (ends_with(n)) ids.insert(n.substr(0, n.size() - ending.size()));
    }
  if (fs::is_directory(images))
    for (const auto& e : fs::directory_iterator(images)) {
      const std::string n = e.path().filename().string();
      // CASE_0000.ext: the channel suffix is '_' and four digits.
      if (!ends_with(n) || n.size() < ending.size() + 5) continue;
      const std::string base = n.substr(0, n.size() - ending.size());
      const std::string suffix = base.substr(base.size() - 5);
      if (suffix[0] == '_' && std::all_of(suffix.begin() + 1, suffix.end(), ::isdigit))
        ids.insert(base.substr(0, base.size() - 5));
    }
  if (ids.empty())
    throw IoError(d.root.string() + ": no cases in imagesTr/ or labelsTr/ (expected CASE_0000" + ending +
                  " and CASE" + ending + ")");
  for (const std::string& id : ids) {
    CaseFiles c;
    c.id = id;
    for (std::size_t ch = 0; ch < d.channel_names.size(); ++ch) {
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "_%04zu", ch);
      c.images.push_back(images / (id + suffix + ending));
    }
    c.label = labels / (id + ending);
    d.cases.push_back(std::move(c));
  }
  return d;
}

std::vector<fs::path> list_files(const fs::path& dir, bool (*keep)(const fs::path&)) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && keep(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

Dataset load_folder(Dataset d) {
  d.layout = DatasetLayout::Folder;
  d.name = d.root.filename().string();
  for (const auto& [img_dir, lbl_dir] : {std::pair<const char*, const char*>{"images", "labels"},
                                         {"imagesTr", "labelsTr"}}) {
    const fs::path images = d.root / img_dir, labels = d.root / lbl_dir;
    if (!fs::is_directory(images) || !fs::is_directory(labels)) continue;
    std::map<std::string, fs::path> label_by_stem;
    for (const auto& p : list_files(labels, is_volume_file)) label_by_stem[stem_of(p)] = p;
    for (const auto& p : list_files(images, is_volume_file)) {
      CaseFiles c;
      c.id = stem_of(p);
      c.images = {p};
      const auto it = label_by_stem.find(c.id);
      c.label = it != label_by_stem.end() ? it->second : labels / p.filename();
      d.cases.push_back(std::move(c));
    }
    if (!d.cases.empty()) return d;
  }
  const auto volumes = list_files(d.root, is_volume_file);
  std::map<std::string, fs::path> labels;
  std::vector<fs::path> images;
  for (const auto& p : volumes) {
    const std::string s = stem_of(p);
    bool is_label = false;
    for (const std::string suffix : {"_label", "_seg"})
      if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
        labels[s.substr(0, s.size() - suffix.size())] = p;
        is_label = true;
      }
    if (!is_label) images.push_back(p);
  }
  for (const auto& p : images) {
    CaseFiles c;
    c.id = stem_of(p);
    c.images = {p};
    const auto it = labels.find(c.id);
    c.label = it != labels.end() ? it->second : d.root / (c.id + "_label" + volume_extension(p));
    d.cases.push_back(std::move(c));
  }
  if (!d.cases.empty()) return d;
  for (const auto& p : list_files(d.root, is_h5_file)) {
    CaseFiles c;
    c.id = stem_of(p);
    c.images = {p};
    c.label = p;
    d.cases.push_back(std::move(c));
  }
  if (!d.cases.empty()) {
    d.layout = DatasetLayout::Hdf5Folder;
    return d;
  }
  throw IoError(d.root.string() +
                ": no dataset found (expected dataset.json, images/ + labels/, NAME.nii.gz + "
                "NAME_label.nii.gz pairs, or HDF5 case files)");
}

}  // namespace

std::string to_string(DatasetLayout layout) {
  switch (layout) {
    case DatasetLayout::Msd: return "MSD";
    case DatasetLayout::NnUNetV2: return "nnU-Net v2";
    case DatasetLayout::Folder: return "folder";
    case DatasetLayout::Hdf5Folder: return "HDF5 folder";
  }
  return "unknown";
}

Dataset load_dataset(const fs::path& path, const DatasetOptions& options) {
  Dataset d;
  d.h5_names = options.h5_names;
  if (!fs::exists(path)) throw IoError(path.string() + ": dataset not found");
  if (fs::is_regular_file(path)) {
    d.manifest = path;
    d.root = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  } else {
    d.root = path;
    d.manifest = path / "dataset.json";
    if (!fs::exists(d.manifest)) {
      d.manifest = path;
      return load_folder(std::move(d));
    }
  }
  const json j = parse_manifest(d.manifest);
  if (!j.is_object()) throw ConfigError(d.manifest.string() + ": expected a JSON object");
  if (j.contains("name") && !j["name"].is_string())
    throw ConfigError(d.manifest.string() + ": 'name' must be a string");
  d.name = j.value("name", d.root.filename().string());
  try {
    if (j.contains("training")) return load_msd(j, std::move(d));
    if (j.contains("channel_names") || j.contains("file_ending")) return load_nnunet(j, std::move(d));
  } catch (const json::exception& e) {
    throw ConfigError(d.manifest.string() + ": " + e.what());
  }
  throw ConfigError(d.manifest.string() +
                    ": neither an MSD manifest ('training') nor an nnU-Net v2 one ('channel_names', "
                    "'file_ending')");
}

Channels read_case_image(const Dataset& dataset, const fs::path& image) {
  if (is_h5_file(image)) {
    survive_h5_case(image, dataset.h5_names);
    return read_h5_channels(image, dataset.h5_names.image);
  }
  return read_channels(image);
}

Volume read_case_label(const Dataset& dataset, const fs::path& label) {
  if (is_h5_file(label)) {
    survive_h5_case(label, dataset.h5_names);
    return read_h5_volume(label, dataset.h5_names.label);
  }
  return read_volume(label);
}

Channels read_case_channels(const Dataset& dataset, const CaseFiles& c) {
  Channels out;
  for (const auto& image : c.images) {
    Channels part = read_case_image(dataset, image);
    for (auto& v : part) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace voxfit::io
