#pragma once
// Memory budgets: "train as if on an RTX 3090 / an A40 / a card with N bytes". On CUDA the
// caching allocator is capped (memory fraction) at what the emulated card leaves for tensors
// once the CUDA context and cuBLAS/cuDNN workspaces, measured on this GPU, are paid; on CPU the
// capped CPU allocator enforces the same number.
#include <c10/core/Device.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "voxfit/memory/card_table.h"

namespace voxfit::memory {

class ScopedCpuBudget;

enum class BudgetKind {
  None,  ///< no cap (the CPU allocator still counts, for profiling)
  Size,  ///< --vram: a card whose CUDA-visible memory is this many bytes
  Card,  ///< --card: a card from the table
};

/// What the user asked for; parse_budget builds it from the CLI's two options.
struct BudgetSpec {
  BudgetKind kind = BudgetKind::None;
  /// The emulated card's CUDA-visible memory (Size: the --vram value; Card: from the table).
  std::uint64_t visible_bytes = 0;
  std::optional<CardSpec> card;  ///< Card only
  /// "none", "rtx3090", "24.00 GiB": stable names for journals and report columns.
  std::string label() const;
};

/// --vram TEXT (a size for core's parse_bytes: "24GiB", "48GB") or --card ID (looked up in
/// `table`), or neither (both empty). Both given, a bad size or an unknown id: ConfigError.
BudgetSpec parse_budget(const std::string& vram_text, const std::string& card_id, const CardTable& table);

/// What a budget became on this machine. All sizes in bytes.
struct BudgetReport {
  std::string label;   ///< BudgetSpec::label()
  std::string device;  ///< "cuda:0", "cpu"
  bool capped = false;
  std::uint64_t visible_bytes = 0;       ///< the emulated card's CUDA-visible memory (0: none)
  std::uint64_t overhead_bytes = 0;      ///< CUDA context + cuBLAS/cuDNN workspaces, measured here (0 on CPU)
  std::uint64_t usable_bytes = 0;        ///< visible - overhead: the cap on tensor memory (0: none)
  std::uint64_t device_total_bytes = 0;  ///< this GPU's CUDA-visible total; this host's RAM on CPU
  double fraction = 1.0;                 ///< usable / device total: the caching allocator's memory fraction

  nlohmann::json to_json() const;
  /// A few human lines: "budget rtx3090 on cuda:0: visible 23.70 GiB - overhead 0.51 GiB = usable ...".
  std::string to_text() const;
};

/// The memory a CUDA process pays before its first tensor, measured on `device`: total - free
/// after creating the context and initialising cuBLAS and cuDNN (a small matmul and convolution),
/// minus what the caching allocator itself has reserved by then. Other processes on the same GPU
/// count as overhead too. UnsupportedError without CUDA.
struct CudaContextOverhead {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t allocator_reserved_bytes = 0;
  std::uint64_t overhead_bytes = 0;
};
CudaContextOverhead measure_cuda_context_overhead(int device);
/// The first measure_cuda_context_overhead(device) of this process, kept for every later budget.
/// Measured again later, the overhead grows with the kernels that earlier runs in the process
/// loaded lazily (693 to 801 MiB on the H200 between the points of one sweep), so that a grid
/// point's budget would depend on which points ran before it in the same process. Measured once,
/// every point of a sweep and every process (a resumed sweep, `--isolate`'s children) gets the
/// same budget, which is also what keys a stopped search's recorded probes.
CudaContextOverhead cuda_context_overhead(int device);

/// Run first thing in main, before any CUDA call: on CUDA builds of LibTorch >= 2.1 the caching
/// allocator gets expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) unless
/// the user set PYTORCH_CUDA_ALLOC_CONF. Fixed-size segments lose several GiB to fragmentation at
/// large batches (UNETR fp16 under 24 GiB on the H200: 19.4 GiB allocated in 23.2 GiB reserved at
/// batch 22, the largest that fit; with expandable segments batch 29 fits). Budgets still hold:
/// the fraction cap covers mapped pages too.
void default_cuda_allocator_settings();
/// PYTORCH_CUDA_ALLOC_CONF as this process runs with it ("" when unset), for result files.
std::string cuda_allocator_settings();

/// Run first thing in main, like default_cuda_allocator_settings: with glibc's malloc, freed host
/// blocks stay in the process for the next allocation (mallopt M_MMAP_MAX 0: no mmap per large
/// block; M_TRIM_THRESHOLD -1: no trimming) unless the user set glibc's malloc tunables
/// (GLIBC_TUNABLES glibc.malloc.*, MALLOC_*_). By default glibc maps every block over 32 MiB
/// afresh and unmaps it on free, so each training step on the CPU zero-fills its activations'
/// pages again: the quickstart's UNet at batch 13 spent 4.5 of its 6 minutes in the kernel and
/// trained 1.2 samples/s instead of 6.4 (docs/performance-notes.md entry 13). This is what
/// PyTorch's CPU performance guides get from jemalloc or tcmalloc. Returns whether it set them.
bool default_host_allocator_settings();
/// The host allocator's settings as this process runs with them, for `voxfit info` and result
/// files: "glibc, freed blocks kept (mmap off, no trim)", "glibc, as GLIBC_TUNABLES / MALLOC_*_
/// set it", "glibc defaults" or "not glibc".
std::string host_allocator_settings();

/// Computes the report for `spec` on `device` without capping anything (on CUDA it measures the
/// overhead). BudgetError when the budget cannot be honoured here: larger than this GPU (or this
/// host's RAM on CPU), or no larger than the measured overhead.
BudgetReport plan_budget(const BudgetSpec& spec, const c10::Device& device);

/// Applies a budget for its lifetime: on CUDA caps the caching allocator with the report's
/// fraction (back to 1.0 on exit); on CPU installs a ScopedCpuBudget of usable_bytes (uncapped
/// but counting for BudgetKind::None, so MemoryTracker works without a budget).
class ScopedBudget {
 public:
  ScopedBudget(const BudgetSpec& spec, const c10::Device& device);
  ~ScopedBudget();
  ScopedBudget(const ScopedBudget&) = delete;
  ScopedBudget& operator=(const ScopedBudget&) = delete;

  const BudgetReport& report() const { return report_; }

 private:
  BudgetReport report_;
  const BudgetReport* previous_report_ = nullptr;
  c10::Device device_;
  std::unique_ptr<ScopedCpuBudget> cpu_;
};

/// The report of the innermost ScopedBudget alive in this process (nullopt: none): what a memory
/// breakdown takes its usable bytes and CUDA context from.
std::optional<BudgetReport> active_budget_report();

}  // namespace voxfit::memory
