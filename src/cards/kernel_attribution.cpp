#include "voxfit/cards/kernel_attribution.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

namespace voxfit::cards {

namespace {

using Shapes = std::vector<std::vector<std::int64_t>>;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

double numel(const std::vector<std::int64_t>& shape) {
  double n = 1;
  for (auto d : shape) n *= static_cast<double>(d);
  return n;
}

double prod(const std::vector<std::int64_t>& shape, std::size_t from, std::size_t to) {
  double n = 1;
  for (std::size_t i = from; i < to && i < shape.size(); ++i) n *= static_cast<double>(shape[i]);
  return n;
}

double tensor_bytes(const Shapes& shapes, const std::vector<std::string>& dtypes, std::size_t i) {
  if (i >= shapes.size() || shapes[i].empty()) return 0;
  return numel(shapes[i]) * (i < dtypes.size() ? element_bytes(dtypes[i]) : 0);
}

bool has(const Shapes& s, std::size_t i, std::size_t min_dim) { return i < s.size() && s[i].size() >= min_dim; }

// Kernels that do an operator's arithmetic (GEMM, convolution, attention), as opposed to the
// layout conversions and reductions a library launches around them.
bool arithmetic_kernel(const std::string& kernel_name) {
  const std::string n = lower(kernel_name);
  for (const char* helper : {"nchwtonhwc", "nhwctonchw", "transpose", "reduce", "elementwise", "vectorized", "copy",
                             "fill", "memset", "convert", "cast"})
    if (contains(n, helper)) return false;
  for (const char* main :
       {"gemm",      "conv",   "cutlass",  "xmma",     "wgrad", "dgrad",  "fprop", "flash", "fmha",
        "attention", "attn",   "implicit", "winograd", "nvjet", "sm80_",  "sm86_", "sm90_", "ampere_",
        "hopper",    "volta_", "turing_",  "cudnn",    "mma",   "cublas", "gemv"})
    if (contains(n, main)) return true;
  return false;
}

}  // namespace

int element_bytes(const std::string& dtype) {
  const std::string t = lower(dtype);
  if (t.empty() || contains(t, "scalar") || contains(t, "list")) return 0;
  if (contains(t, "half") || contains(t, "bfloat")) return 2;
  if (contains(t, "double")) return 8;
  if (contains(t, "float")) return 4;
  if (contains(t, "bool") || contains(t, "char")) return 1;
  if (contains(t, "long")) return 8;
  if (contains(t, "short")) return 2;
  if (contains(t, "int")) return 4;
  return 0;
}

OpCost estimate_op_cost(const std::string& op_name, const Shapes& s, const std::vector<std::string>& dtypes,
                        std::uint64_t profiler_flops) {
  const std::string n = op_name.rfind("aten::", 0) == 0 ? op_name.substr(6) : op_name;
  OpCost c;
  double in_bytes = 0, largest = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double b = tensor_bytes(s, dtypes, i);
    in_bytes += b;
    largest = std::max(largest, b);
    if (c.dtype.empty() && b > 0) c.dtype = dtypes[i];
  }
  const int elt = c.dtype.empty() ? 4 : element_bytes(c.dtype);
  double flops = 0, out_bytes = largest;

  const bool backward = contains(n, "backward");
  const bool transposed = contains(n, "transpose") && contains(n, "conv");
  const bool conv = !transposed && (contains(n, "conv") && (n.rfind("conv", 0) == 0 || contains(n, "convolution")));
  const bool attention = contains(n, "scaled_dot_product") || contains(n, "flash_attention") ||
                         contains(n, "efficient_attention") || contains(n, "cudnn_attention");
  if ((conv || transposed) && backward) {
    // convolution_backward(grad_output, input, weight, ...): grad input and grad weight, each as
    // costly as the forward, whose spatial work is the smaller of input and output grids (the
    // output of a strided convolution, the input of a transposed one).
    if (has(s, 0, 3) && has(s, 1, 3) && has(s, 2, 3)) {
      const auto& go = s[0];
      const auto& in = s[1];
      const auto& w = s[2];
      const double spatial = std::min(prod(in, 2, in.size()), prod(go, 2, go.size()));
      flops = 2.0 * 2.0 * static_cast<double>(in[0]) * static_cast<double>(w[0]) * static_cast<double>(w[1]) *
              prod(w, 2, w.size()) * spatial;
      out_bytes = tensor_bytes(s, dtypes, 1) + tensor_bytes(s, dtypes, 2);
    }
    c.matrix = c.convolution = true;
  } else if (transposed) {
    // weight [C_in, C_out / groups, k...]; stride = kernel size (the upsampling of UNETR / UNet3D).
    if (has(s, 0, 3) && has(s, 1, 3)) {
      const auto& in = s[0];
      const auto& w = s[1];
      const double in_spatial = prod(in, 2, in.size());
      flops = 2.0 * static_cast<double>(in[0]) * static_cast<double>(w[0]) * static_cast<double>(w[1]) *
              prod(w, 2, w.size()) * in_spatial;
      out_bytes = static_cast<double>(in[0]) * static_cast<double>(w[1]) * in_spatial * prod(w, 2, w.size()) * elt;
    }
    c.matrix = c.convolution = true;
  } else if (conv) {
    // weight [C_out, C_in / groups, k...]. The stride is not in the trace: an even kernel is taken
    // as a patch embedding or downsampling (stride = kernel), an odd one as stride 1, same padding.
    if (has(s, 0, 3) && has(s, 1, 3)) {
      const auto& in = s[0];
      const auto& w = s[1];
      double out_spatial = 1;
      for (std::size_t d = 2; d < in.size(); ++d) {
        const std::int64_t k = d < w.size() ? w[d] : 1;
        out_spatial *= static_cast<double>(k > 1 && k % 2 == 0 ? in[d] / k : in[d]);
      }
      flops = 2.0 * static_cast<double>(in[0]) * static_cast<double>(w[0]) * static_cast<double>(w[1]) *
              prod(w, 2, w.size()) * out_spatial;
      out_bytes = static_cast<double>(in[0]) * static_cast<double>(w[0]) * out_spatial * elt;
    }
    c.matrix = c.convolution = true;
  } else if (attention) {
    // q [B, H, L, D], k [B, H, S, D]: QK^T and PV, 2 * 2 * B*H*L*S*D; the backward recomputes
    // the scores and makes three products (about 2.5 times the forward).
    const std::size_t q = backward ? 1 : 0;
    if (has(s, q, 2) && has(s, q + 1, 2)) {
      const auto& qs = s[q];
      const auto& ks = s[q + 1];
      flops =
          4.0 * prod(qs, 0, qs.size() - 1) * static_cast<double>(ks[ks.size() - 2]) * static_cast<double>(qs.back());
      if (backward) flops *= 2.5;
      out_bytes = backward
                      ? tensor_bytes(s, dtypes, q) + tensor_bytes(s, dtypes, q + 1) + tensor_bytes(s, dtypes, q + 2)
                      : tensor_bytes(s, dtypes, q);
    }
    c.matrix = true;
  } else if (n == "mm" || n == "addmm" || n == "bmm" || n == "baddbmm" || n == "matmul" || n == "linear") {
    const bool with_bias = n == "addmm" || n == "baddbmm";
    const std::size_t a = with_bias ? 1 : 0;
    if (has(s, a, 1) && has(s, a + 1, 1)) {
      const auto& as = s[a];
      const auto& bs = s[a + 1];
      const double k = static_cast<double>(as.back());
      double m_total = numel(as) / std::max(k, 1.0);  // every row of every batch of a
      double cols = 0;
      if (n == "linear") {
        cols = static_cast<double>(bs[0]);  // weight [out, in]
      } else {
        cols = bs.size() >= 2 ? static_cast<double>(bs.back()) : 1.0;
        // a batched b against a 2-D a (matmul broadcasting): b's batches multiply the rows
        if (bs.size() > 2 && as.size() <= 2) m_total *= prod(bs, 0, bs.size() - 2);
      }
      flops = 2.0 * m_total * k * cols;
      out_bytes = m_total * cols * elt;
    }
    c.matrix = true;
  }
  c.flops = profiler_flops > 0 ? static_cast<double>(profiler_flops) : flops;
  c.bytes = in_bytes + out_bytes;
  return c;
}

namespace {

// CPU operators nest per thread by start and duration (a child lies inside its parent). Fills
// `ops` with the operator events' indices and returns each one's parent (-1 at the top).
std::unordered_map<std::size_t, std::ptrdiff_t> nest_operators(const std::vector<TraceEvent>& events,
                                                               std::vector<std::size_t>& ops) {
  for (std::size_t i = 0; i < events.size(); ++i)
    if (!events[i].on_device) ops.push_back(i);
  std::sort(ops.begin(), ops.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = events[a];
    const auto& y = events[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    return x.duration_ns > y.duration_ns;  // the enclosing one first
  });
  std::unordered_map<std::size_t, std::ptrdiff_t> parent;
  std::vector<std::size_t> stack;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto& e = events[ops[k]];
    if (k > 0 && events[ops[k - 1]].thread != e.thread) stack.clear();
    while (!stack.empty()) {
      const auto& top = events[stack.back()];
      if (e.start_ns >= top.start_ns && e.start_ns + e.duration_ns <= top.start_ns + top.duration_ns) break;
      stack.pop_back();
    }
    parent[ops[k]] = stack.empty() ? -1 : static_cast<std::ptrdiff_t>(stack.back());
    stack.push_back(ops[k]);
  }
  return parent;
}

// The unit an operator's arithmetic runs on: tensor cores for 16-bit matrix products, TF32 where
// the run allowed it for float32, else the FP32 vector units.
MathKind math_kind(const OpCost& c, const AttributionOptions& o) {
  if (!c.matrix) return MathKind::kFp32;
  const int eb = element_bytes(c.dtype);
  if (contains(lower(c.dtype), "bfloat")) return MathKind::kBf16Tensor;
  if (eb == 2) return MathKind::kFp16Tensor;
  if (eb == 4 && (c.convolution ? o.tf32_cudnn : o.tf32_matmul)) return MathKind::kTf32;
  return MathKind::kFp32;
}

// A device event with the operator that launched it and the operator its FLOPs come from.
struct Linked {
  std::size_t event;
  std::ptrdiff_t op = -1;
  std::ptrdiff_t source = -1;
};

// Identical launches (name, kind, operators, unit, FLOPs and bytes) summed into one record a step,
// the longest first.
std::vector<KernelRecord> aggregate_launches(const std::vector<TraceEvent>& events, const std::vector<Linked>& linked,
                                             const std::vector<double>& flops, const std::vector<double>& bytes,
                                             const std::vector<MathKind>& math, std::int64_t profiled_steps) {
  // Aggregate identical launches.
  std::map<std::string, KernelRecord> records;
  const double steps = static_cast<double>(std::max<std::int64_t>(profiled_steps, 1));
  std::map<std::string, double> call_counts;
  for (std::size_t m = 0; m < linked.size(); ++m) {
    const auto& e = events[linked[m].event];
    const std::string op = linked[m].op >= 0 ? events[static_cast<std::size_t>(linked[m].op)].name : "";
    const std::string source = linked[m].source >= 0 ? events[static_cast<std::size_t>(linked[m].source)].name : "";
    char num[96];
    std::snprintf(num, sizeof num, "|%.6g|%.6g", flops[m], bytes[m]);
    const std::string key = e.name + "|" + e.kind + "|" + op + "|" + source + "|" + to_string(math[m]) + num;
    auto [it, fresh] = records.try_emplace(key);
    KernelRecord& r = it->second;
    if (fresh) {
      r.name = e.name;
      r.kind = e.kind.empty() ? "kernel" : e.kind;
      r.op = op;
      r.flops_op = source;
      r.math = math[m];
    }
    call_counts[key] += 1;
    r.time_us += static_cast<double>(e.duration_ns) * 1e-3 / steps;
    r.flops += flops[m] / steps;
    r.bytes += bytes[m] / steps;
  }
  std::vector<KernelRecord> out;
  for (auto& [key, r] : records) {
    r.calls = std::max<std::int64_t>(1, std::llround(call_counts[key] / steps));
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.time_us > b.time_us; });
  return out;
}

}  // namespace

std::vector<KernelRecord> attribute_kernels(const std::vector<TraceEvent>& events, const AttributionOptions& o) {
  std::vector<std::size_t> ops;
  auto parent = nest_operators(events, ops);
  std::unordered_map<std::uint64_t, std::size_t> by_correlation;
  for (std::size_t i : ops)
    if (events[i].correlation > 0) by_correlation.emplace(events[i].correlation, i);

  std::unordered_map<std::size_t, OpCost> costs;
  const auto cost_of = [&](std::size_t i) -> const OpCost& {
    auto it = costs.find(i);
    if (it == costs.end())
      it =
          costs.emplace(i, estimate_op_cost(events[i].name, events[i].shapes, events[i].dtypes, events[i].flops)).first;
    return it->second;
  };

  // Each device event: its operator and the operator its FLOPs come from (the innermost with a
  // profiler FLOP count, else the outermost with an estimate: the call that knows the whole
  // convolution, e.g. conv_transpose3d rather than the generic convolution below it).
  std::vector<Linked> linked;
  std::map<std::ptrdiff_t, std::vector<std::size_t>> by_source;  // source op -> indices into linked
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!events[i].on_device) continue;
    Linked l{i};
    const auto it = by_correlation.find(events[i].linked_correlation);
    if (events[i].kind == "kernel" && events[i].linked_correlation > 0 && it != by_correlation.end()) {
      l.op = static_cast<std::ptrdiff_t>(it->second);
      std::ptrdiff_t profiled = -1, estimated = -1;
      for (std::ptrdiff_t a = l.op; a >= 0; a = parent[static_cast<std::size_t>(a)]) {
        const auto& e = events[static_cast<std::size_t>(a)];
        if (profiled < 0 && e.flops > 0) profiled = a;
        if (cost_of(static_cast<std::size_t>(a)).flops > 0) estimated = a;
      }
      l.source = profiled >= 0 ? profiled : (estimated >= 0 ? estimated : l.op);
    }
    if (l.source >= 0) by_source[l.source].push_back(linked.size());
    linked.push_back(l);
  }

  // One operator call's FLOPs and bytes go to its arithmetic kernels in proportion to their time;
  // the helper kernels around them (layout changes, split-K reductions) stay memory bound.
  std::vector<double> flops(linked.size(), 0.0), bytes(linked.size(), 0.0);
  std::vector<MathKind> math(linked.size(), MathKind::kFp32);
  for (const auto& [source, members] : by_source) {
    const OpCost& c = cost_of(static_cast<std::size_t>(source));
    if (c.flops <= 0) {
      // no arithmetic known: the operator's bytes, shared by time, classify nothing; keep them
      // for the record (a memory-bound kernel scales with bandwidth whatever its bytes).
      double total = 0;
      for (std::size_t m : members) total += static_cast<double>(events[linked[m].event].duration_ns);
      for (std::size_t m : members)
        bytes[m] = total > 0 ? c.bytes * static_cast<double>(events[linked[m].event].duration_ns) / total
                             : c.bytes / static_cast<double>(members.size());
      continue;
    }
    std::vector<std::size_t> main;
    for (std::size_t m : members)
      if (arithmetic_kernel(events[linked[m].event].name)) main.push_back(m);
    // No library kernel by name: the kernels the source operator launched itself (an elementwise
    // add); kernels of child operators without arithmetic (a softmax inside unfused attention)
    // get none of an ancestor's FLOPs.
    if (main.empty())
      for (std::size_t m : members)
        if (linked[m].op == source) main.push_back(m);
    double total = 0;
    for (std::size_t m : main) total += static_cast<double>(events[linked[m].event].duration_ns);
    const MathKind kind = math_kind(c, o);
    for (std::size_t m : main) {
      const double share = total > 0 ? static_cast<double>(events[linked[m].event].duration_ns) / total
                                     : 1.0 / static_cast<double>(main.size());
      flops[m] = c.flops * share;
      bytes[m] = c.bytes * share;
      math[m] = kind;
    }
  }

  return aggregate_launches(events, linked, flops, bytes, math, o.steps);
}

}  // namespace voxfit::cards
