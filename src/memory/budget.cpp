#include "voxfit/memory/budget.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "voxfit/core/error.h"
#include "voxfit/core/runtime.h"
#include "voxfit/core/torch_compat.h"
#include "voxfit/core/units.h"
#include "voxfit/memory/cpu_budget.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(VOXFIT_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace voxfit::memory {

namespace {

int cuda_index(const c10::Device& device) { return device.has_index() ? device.index() : 0; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string BudgetSpec::label() const {
  switch (kind) {
    case BudgetKind::None:
      return "none";
    case BudgetKind::Card:
      return card ? card->id : "card";
    case BudgetKind::Size:
      return format_bytes(visible_bytes);
  }
  return "none";
}

BudgetSpec parse_budget(const std::string& vram_text, const std::string& card_id, const CardTable& table) {
  BudgetSpec spec;
  if (!vram_text.empty() && !card_id.empty())
    throw ConfigError("--vram and --card both given: a budget is either a size or a card, not both");
  if (!vram_text.empty()) {
    spec.kind = BudgetKind::Size;
    spec.visible_bytes = parse_bytes(vram_text, "--vram");
  } else if (!card_id.empty()) {
    spec.kind = BudgetKind::Card;
    spec.card = table.at(card_id);
    spec.visible_bytes = spec.card->cuda_visible_bytes();
  }
  return spec;
}

nlohmann::json BudgetReport::to_json() const {
  return {{"label", label},
          {"device", device},
          {"capped", capped},
          {"visible_bytes", visible_bytes},
          {"overhead_bytes", overhead_bytes},
          {"usable_bytes", usable_bytes},
          {"device_total_bytes", device_total_bytes},
          {"fraction", fraction}};
}

std::string BudgetReport::to_text() const {
  std::string s = "budget " + label + " on " + device + ": ";
  if (!capped) return s + "no cap (" + format_bytes(device_total_bytes) + " total)";
  if (device == "cpu")
    return s + format_bytes(usable_bytes) + " for tensors (capped CPU allocator; host RAM " +
           format_bytes(device_total_bytes) + ")";
  return s + "CUDA-visible " + format_bytes(visible_bytes) + " - context and library workspaces " +
         format_bytes(overhead_bytes) + " = " + format_bytes(usable_bytes) + " for tensors (memory fraction " +
         fixed(fraction, 4) + " of " + format_bytes(device_total_bytes) + ")";
}

CudaContextOverhead measure_cuda_context_overhead(int device) {
#if defined(VOXFIT_WITH_CUDA)
  if (!cuda_available())
    throw UnsupportedError("a memory budget on cuda:" + std::to_string(device) + ": no CUDA device (" +
                           no_gpu_reason() + ")");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  {
    // The first tensor creates the context; mm initialises cuBLAS (fp32 and, through the half
    // product, cuBLASLt), conv3d initialises cuDNN: what every training step will need anyway.
    const auto opts = at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    const at::Tensor a = at::ones({64, 64}, opts);
    const at::Tensor mm = at::mm(a, a) + at::mm(a.to(at::kHalf), a.to(at::kHalf)).to(at::kFloat);
    const at::Tensor x = at::ones({1, 1, 8, 8, 8}, opts);
    const at::Tensor w = at::ones({1, 1, 3, 3, 3}, opts);
    const at::Tensor y = at::conv3d(x, w);
    (void)(mm.sum().item<float>() + y.sum().item<float>());  // forces the kernels to run
  }
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    throw Error("cudaMemGetInfo failed on cuda:" + std::to_string(device));
  CudaContextOverhead o;
  o.total_bytes = total_b;
  o.free_bytes = free_b;
  // Index 0 of a StatArray is StatType::AGGREGATE (all pools) in 1.13 and 2.x.
  o.allocator_reserved_bytes = static_cast<std::uint64_t>(compat::device_stats(device).reserved_bytes[0].current);
  const std::uint64_t used = o.total_bytes - o.free_bytes;
  o.overhead_bytes = used > o.allocator_reserved_bytes ? used - o.allocator_reserved_bytes : 0;
  return o;
#else
  throw UnsupportedError("measuring the CUDA context on cuda:" + std::to_string(device) + ": this build has no CUDA");
#endif
}

CudaContextOverhead cuda_context_overhead(int device) {
  static std::mutex mutex;
  static std::map<int, CudaContextOverhead> first;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = first.find(device);
  if (it != first.end()) return it->second;
  return first.emplace(device, measure_cuda_context_overhead(device)).first->second;
}

BudgetReport plan_budget(const BudgetSpec& spec, const c10::Device& device) {
  BudgetReport r;
  r.label = spec.label();
  r.device = device.str();
  if (device.is_cuda()) {
    const CudaContextOverhead o = cuda_context_overhead(cuda_index(device));
    r.device_total_bytes = o.total_bytes;
    r.overhead_bytes = o.overhead_bytes;
  } else if (!device.is_cpu()) {
    throw UnsupportedError("memory budgets work on cpu and cuda devices, not " + device.str());
  } else {
    r.device_total_bytes = host_memory().total_bytes;
  }
  if (spec.kind == BudgetKind::None) return r;

  r.capped = true;
  r.visible_bytes = spec.visible_bytes;
  const std::string what = "budget " + r.label + " (" + format_bytes(r.visible_bytes) + ")";
  if (r.device_total_bytes > 0 && r.visible_bytes > r.device_total_bytes)
    throw BudgetError(what + " is larger than " + r.device + "'s " + format_bytes(r.device_total_bytes) +
                      (device.is_cuda() ? " of CUDA-visible memory" : " of RAM") + ": it cannot be emulated here");
  if (r.visible_bytes <= r.overhead_bytes)
    throw BudgetError(what + " does not even hold the CUDA context and library workspaces (" +
                      format_bytes(r.overhead_bytes) + " measured on " + r.device + ")");
  r.usable_bytes = r.visible_bytes - r.overhead_bytes;
  if (r.device_total_bytes > 0)
    r.fraction = static_cast<double>(r.usable_bytes) / static_cast<double>(r.device_total_bytes);
  return r;
}

namespace {
// The innermost live ScopedBudget's report (budgets do not nest in practice: one per search / run).
std::atomic<const BudgetReport*> g_active_report{nullptr};
}  // namespace

std::optional<BudgetReport> active_budget_report() {
  const BudgetReport* r = g_active_report.load();
  return r ? std::optional<BudgetReport>(*r) : std::nullopt;
}

ScopedBudget::ScopedBudget(const BudgetSpec& spec, const c10::Device& device)
    : report_(plan_budget(spec, device)), device_(device) {
  previous_report_ = g_active_report.exchange(&report_);
  if (device_.is_cuda()) {
#if defined(VOXFIT_WITH_CUDA)
    if (report_.capped) compat::set_memory_fraction(report_.fraction, cuda_index(device_));
#endif
    return;
  }
  cpu_ = std::make_unique<ScopedCpuBudget>(report_.capped ? report_.usable_bytes
                                                          : std::numeric_limits<std::uint64_t>::max());
}

ScopedBudget::~ScopedBudget() {
  g_active_report.store(previous_report_);
#if defined(VOXFIT_WITH_CUDA)
  if (device_.is_cuda() && report_.capped) compat::set_memory_fraction(1.0, cuda_index(device_));
#endif
}

void default_cuda_allocator_settings() {
#if defined(VOXFIT_WITH_CUDA) && VOXFIT_TORCH_AT_LEAST(2, 1)
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
#endif
}

std::string cuda_allocator_settings() {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  return conf ? conf : "";
}

namespace {

std::atomic<bool> host_allocator_set{false};

bool user_set_malloc_tunables() {
  for (const char* name : {"MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(name) != nullptr) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

}  // namespace

bool default_host_allocator_settings() {
#if defined(__GLIBC__)
  if (host_allocator_set.load()) return true;
  if (user_set_malloc_tunables()) return false;
  // glibc documents -1 as "disables trimming completely" (mallopt(3)).
  if (mallopt(M_MMAP_MAX, 0) != 1 || mallopt(M_TRIM_THRESHOLD, -1) != 1) return false;
  host_allocator_set.store(true);
  return true;
#else
  return false;
#endif
}

std::string host_allocator_settings() {
#if defined(__GLIBC__)
  if (host_allocator_set.load()) return "glibc, freed blocks kept (mmap off, no trim)";
  if (user_set_malloc_tunables()) return "glibc, as GLIBC_TUNABLES / MALLOC_*_ set it";
  return "glibc defaults";
#else
  return "not glibc";
#endif
}

}  // namespace voxfit::memory
