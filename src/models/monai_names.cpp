// The MONAI naming rules shared by the networks (monai_naming.h), and monai_names.h's lookup
// through each network's registry entry.
#include "voxfit/models/monai_names.h"

#include <cctype>

#include "monai_naming.h"
#include "voxfit/models/network.h"

namespace voxfit::models {

namespace monai {

Parts split(const std::string& s) {
  Parts out;
  size_t start = 0;
  for (size_t dot; (dot = s.find('.', start)) != std::string::npos; start = dot + 1)
    out.push_back(s.substr(start, dot - start));
  out.push_back(s.substr(start));
  return out;
}

std::string join(const Parts& p, size_t from) {
  std::string s;
  for (size_t i = from; i < p.size(); ++i) s += (i > from ? "." : "") + p[i];
  return s;
}

bool is_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

Name index_after(const std::string& s, const std::string& prefix) {
  if (s.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string rest = s.substr(prefix.size());
  if (!is_digits(rest)) return std::nullopt;
  return rest;
}

Name conv_param(const Parts& p, size_t i) {
  if (p.size() != i + 1) return std::nullopt;
  return "conv." + p[i];
}

Name unet_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  const std::string& m = p[i];
  if (m == "conv1" || m == "conv2" || m == "conv3") {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>(m + "." + *c) : std::nullopt;
  }
  if (m == "norm1" || m == "norm2" || m == "norm3") return join(p, i);
  return std::nullopt;
}

Name transformer_block(const Parts& p, size_t i, const std::string& attn_out) {
  if (p.size() < i + 2) return std::nullopt;
  if (p[i] == "norm1" || p[i] == "norm2") return join(p, i);
  if (p[i] == "attn") return p[i + 1] == "proj" ? "attn." + attn_out + "." + join(p, i + 2) : join(p, i);
  if (p[i] == "mlp" && p.size() == i + 3) {
    if (p[i + 1] == "fc1") return "mlp.linear1." + p[i + 2];
    if (p[i + 1] == "fc2") return "mlp.linear2." + p[i + 2];
  }
  return std::nullopt;
}

Name up_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  Name rest;
  if (p[i] == "transp_conv")
    rest = conv_param(p, i + 1);
  else if (p[i] == "conv_block")
    rest = unet_block(p, i + 1);
  return rest ? std::optional<std::string>(p[i] + "." + *rest) : std::nullopt;
}

Name pr_up_block(const Parts& p, size_t i) {
  if (p.size() < i + 2) return std::nullopt;
  if (p[i] == "transp_conv_init") {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>("transp_conv_init." + *c) : std::nullopt;
  }
  if (const auto n = index_after(p[i], "transp_conv")) {
    const auto c = conv_param(p, i + 1);
    return c ? std::optional<std::string>("blocks." + *n + ".0." + *c) : std::nullopt;
  }
  if (const auto n = index_after(p[i], "block")) {
    const auto b = unet_block(p, i + 1);
    return b ? std::optional<std::string>("blocks." + *n + ".1." + *b) : std::nullopt;
  }
  return std::nullopt;
}

Name out_block(const Parts& p) {
  const auto c = conv_param(p, 1);
  return c ? std::optional<std::string>("out.conv." + *c) : std::nullopt;
}

Name decoder(const Parts& p) {
  if (!index_after(p[0], "decoder")) return std::nullopt;
  const auto b = up_block(p, 1);
  return b ? std::optional<std::string>(p[0] + "." + *b) : std::nullopt;
}

Name basic_encoder(const Parts& p) {
  const auto b = unet_block(p, 1);
  return b ? std::optional<std::string>(p[0] + ".layer." + *b) : std::nullopt;
}

std::string rename(const std::string& name, Name (*rule)(const Parts&)) { return rule(split(name)).value_or(name); }

nlohmann::json norm(const std::string& norm_name) {
  if (norm_name == "instance" || norm_name == "batch") return norm_name;
  if (norm_name == "instance_affine") return nlohmann::json::array({"instance", {{"affine", true}}});
  return nullptr;
}

bool is_true(const std::string& value) { return value == "true" || value == "1" || value == "yes" || value == "on"; }

std::vector<int64_t> integers(const std::string& value) {
  std::vector<int64_t> out;
  size_t start = 0;
  for (size_t comma; (comma = value.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(std::stoll(value.substr(start, comma - start)));
  out.push_back(std::stoll(value.substr(start)));
  return out;
}

}  // namespace monai

bool has_monai_names(const std::string& model) {
  const auto& ref = find_model(model).reference;
  return ref && ref->framework == "monai";
}

std::string monai_name(const std::string& model, const std::string& name) {
  return has_monai_names(model) ? find_model(model).reference->name(name) : name;
}

}  // namespace voxfit::models
