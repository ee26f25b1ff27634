#include "voxfit/cards/utilisation.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "voxfit/cards/roofline.h"

namespace voxfit::cards {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

/// The arithmetic most of the step's counted FLOPs ran on.
MathKind dominant_math(const KernelProfile& p) {
  std::map<MathKind, double> flops;
  for (const auto& k : p.kernels) flops[k.math] += k.flops;
  MathKind best = MathKind::kFp32;
  double most = -1;
  for (const auto& [math, f] : flops)
    if (f > most) best = math, most = f;
  return best;
}

std::string fmt(const char* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

/// At most `n` characters, with Markdown's cell separator escaped.
std::string cell(const std::string& s, std::size_t n) {
  std::string out;
  for (char c : s.size() <= n ? s : s.substr(0, n - 3) + "...") {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
  std::string out;
  int depth = 0;
  for (char c : name) {
    if (c == '<' && depth++ == 0) out += "<...>";
    if (c == '>' && depth > 0 && --depth == 0) continue;
    if (depth == 0 && c == '(') break;
    if (depth == 0 && c != '<') out += c;
  }
  return out;
}

GemmReference gemm_reference(const KernelProfile& p, const memory::CardSpec* card, double override_tflops) {
  if (p.gemm_tflops > 0) return {p.gemm_tflops, "measured " + to_string(p.gemm_math) + " GEMM on this card"};
  if (override_tflops > 0) return {override_tflops, "--gemm-tflops"};
  if (card) {
    const MathKind math = dominant_math(p);
    return {peak_flops(*card, math) / 1e12, "datasheet " + to_string(math) + " peak of " + card->id};
  }
  return {};
}

std::string operator_class(const KernelRecord& k) {
  const std::string& op = k.flops_op.empty() ? k.op : k.flops_op;
  if (k.kind == "memcpy" || k.kind == "memset") return "copy / layout";
  if (contains(op, "attention")) return "attention";
  if (contains(op, "conv")) return "convolution";
  if (contains(op, "aten::mm") || contains(op, "matmul") || contains(op, "linear") || contains(op, "addmm") ||
      contains(op, "bmm"))
    return "matrix product";
  if (contains(op, "norm") || contains(op, "Norm")) return "normalisation";
  if (contains(op, "adam") || contains(op, "sgd") || contains(op, "_amp_") || contains(op, "foreach"))
    return "optimiser";
  if (contains(op, "nll") || contains(op, "softmax") || contains(op, "DiceCe") || contains(op, "Loss")) return "loss";
  if (contains(op, "copy") || contains(op, "cat") || contains(op, "roll") || contains(op, "fill") ||
      contains(op, "contiguous") || contains(op, "permute") || contains(op, "index"))
    return "copy / layout";
  return "elementwise / other";
}

Utilisation utilisation(const KernelProfile& p, const memory::CardSpec* card, double override_tflops, int top_kernels) {
  Utilisation u;
  u.label = p.label();
  for (const std::string& part :
       {std::string(p.cuda_graph ? "timed as CUDA graph replays, kernels from eager steps" : ""),
        std::string(p.channels_last ? "channels-last" : ""),
        p.torch_version.empty() ? std::string() : "LibTorch " + p.torch_version})
    if (!part.empty()) u.settings += (u.settings.empty() ? "" : ", ") + part;
  u.samples_per_s = p.samples_per_s();
  u.device_name = p.device_name;
  u.wall_s = p.wall_s_per_step;
  u.kernel_s = p.kernel_s_per_step();
  std::map<std::string, UseRow> classes;
  for (const auto& k : p.kernels) {
    u.flops += k.flops;
    UseRow& c = classes[operator_class(k)];
    c.time_us += k.time_us;
    c.flops += k.flops;
    c.bytes += k.bytes;
  }
  u.tflops = u.wall_s > 0 ? u.flops / u.wall_s / 1e12 : 0.0;
  u.reference = gemm_reference(p, card, override_tflops);
  u.share = u.reference.tflops > 0 ? u.tflops / u.reference.tflops : 0.0;
  u.bandwidth_gbs = card ? card->bandwidth_gbs : 0.0;
  const auto by_time = [](const UseRow& a, const UseRow& b) { return a.time_us > b.time_us; };
  for (auto& [name, row] : classes) {
    row.name = name;
    u.classes.push_back(row);
  }
  std::stable_sort(u.classes.begin(), u.classes.end(), by_time);
  std::map<std::pair<std::string, std::string>, UseRow> kernels;
  for (const auto& k : p.kernels) {
    const std::string op = k.flops_op.empty() ? k.op : k.flops_op;
    UseRow& r = kernels[{short_kernel_name(k.name), op}];
    r.time_us += k.time_us;
    r.flops += k.flops;
    r.bytes += k.bytes;
  }
  for (auto& [key, row] : kernels) {
    row.name = key.first;
    row.op = key.second;
    u.top.push_back(row);
  }
  std::stable_sort(u.top.begin(), u.top.end(), by_time);
  if (static_cast<int>(u.top.size()) > top_kernels) u.top.resize(static_cast<std::size_t>(std::max(0, top_kernels)));
  return u;
}

std::string utilisation_line(const Utilisation& u) {
  std::string line = fmt("%.3f", u.flops / 1e12) + " TFLOP counted a step: " + fmt("%.1f", u.tflops) + " TFLOP/s";
  if (u.reference.tflops > 0)
    line += ", " + fmt("%.1f", 100 * u.share) + "% of the " + u.reference.source + " (" +
            fmt("%.1f", u.reference.tflops) + " TFLOP/s)";
  return line;
}

std::string utilisation_markdown(const Utilisation& u) {
  const double kernel_us = u.kernel_s * 1e6;
  const auto bw = [&](const UseRow& r) {
    return u.bandwidth_gbs > 0 ? fmt("%.0f%%", 100 * r.gb_per_s() / u.bandwidth_gbs) : std::string("-");
  };
  std::string md =
      "## " + u.label + " on " + u.device_name + (u.settings.empty() ? "" : " (" + u.settings + ")") + "\n\n";
  md += "- " + utilisation_line(u) + "\n- a step " + fmt("%.3f", u.wall_s * 1e3) + " ms of wall time (" +
        fmt("%.1f", u.samples_per_s) + " samples/s): kernels " + fmt("%.3f", u.kernel_s * 1e3) +
        " ms, host / launch gaps " + fmt("%.3f", std::max(0.0, u.wall_s - u.kernel_s) * 1e3) + " ms\n\n";
  const std::string bw_head =
      u.bandwidth_gbs > 0 ? "% of " + fmt("%.0f", u.bandwidth_gbs) + " GB/s" : std::string("% of bandwidth");
  md += "| class | kernel ms | share of kernel time | GFLOP | TFLOP/s | GB | GB/s | " + bw_head + " |\n";
  md += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& c : u.classes)
    md += "| " + c.name + " | " + fmt("%.3f", c.time_us / 1e3) + " | " +
          fmt("%.1f%%", kernel_us > 0 ? 100 * c.time_us / kernel_us : 0.0) + " | " + fmt("%.1f", c.flops / 1e9) +
          " | " + fmt("%.1f", c.tflops()) + " | " + fmt("%.3f", c.bytes / 1e9) + " | " + fmt("%.0f", c.gb_per_s()) +
          " | " + bw(c) + " |\n";
  if (!u.top.empty()) {
    md += "\nThe " + std::to_string(u.top.size()) + " kernels with the most time:\n\n";
    md += "| kernel | operator | ms | share | TFLOP/s | GB | GB/s | " + bw_head + " |\n";
    md += "|---|---|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& k : u.top)
      md += "| `" + cell(k.name, 60) + "` | " + (k.op.empty() ? std::string("-") : cell(k.op, 40)) + " | " +
            fmt("%.3f", k.time_us / 1e3) + " | " + fmt("%.1f%%", kernel_us > 0 ? 100 * k.time_us / kernel_us : 0.0) +
            " | " + fmt("%.1f", k.tflops()) + " | " + fmt("%.3f", k.bytes / 1e9) + " | " + fmt("%.0f", k.gb_per_s()) +
            " | " + bw(k) + " |\n";
  }
  return md;
}

}  // namespace voxfit::cards
