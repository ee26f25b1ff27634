#pragma once
// From a profiler trace to kernel records: each GPU kernel is linked to the CPU operator that
// launched it (the operator's correlation id equals the kernel's linked correlation id, as in
// PyTorch's own profiler), and gets that operator's FLOPs and bytes: the profiler's FLOP count
// where it has one (conv2d, mm, addmm, bmm, ...), else an estimate from the input shapes
// (3-D and transposed convolutions, their backward, fused attention). Bytes are the inputs' sizes
// plus an output estimate: an upper bound on DRAM traffic that only decides which side of a card's
// ridge point a kernel falls on.
#include <cstdint>
#include <string>
#include <vector>

#include "voxfit/cards/kernel_profile.h"

namespace voxfit::cards {

/// One event of a trace, independent of the LibTorch version that recorded it.
struct TraceEvent {
  std::string name;
  bool on_device = false;    ///< a GPU activity (kernel, memcpy, memset); else a CPU operator
  std::string kind;          ///< device events: "kernel", "memcpy", "memset"
  std::uint64_t thread = 0;  ///< CPU operators: the thread (nesting is per thread)
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
  std::uint64_t correlation = 0;                  ///< CPU operators: their correlation id
  std::uint64_t linked_correlation = 0;           ///< device events: the correlation id of their operator
  std::uint64_t flops = 0;                        ///< the profiler's FLOP count of a CPU operator (0: none)
  std::vector<std::vector<std::int64_t>> shapes;  ///< input shapes (empty for non-tensors)
  std::vector<std::string> dtypes;                ///< input types as the profiler names them
};

struct AttributionOptions {
  std::int64_t steps = 1;    ///< steps in the trace: records are per step
  bool tf32_matmul = false;  ///< float32 matrix products may use TF32
  bool tf32_cudnn = false;   ///< float32 convolutions may use TF32
};

/// The FLOPs and bytes of one operator call, and whether it runs on tensor cores.
struct OpCost {
  double flops = 0;
  double bytes = 0;
  bool matrix = false;       ///< a matrix product, convolution or attention (tensor cores where the type has them)
  bool convolution = false;  ///< a convolution (cuDNN's TF32 switch rather than cuBLAS's)
  std::string dtype;         ///< the profiler's type name of the first tensor input
};

/// Estimates an operator's cost from its name and inputs. `profiler_flops` (> 0) wins over the
/// estimate. Operators it does not know cost 0 FLOPs and the bytes of their inputs plus an output
/// the size of the largest input.
OpCost estimate_op_cost(const std::string& name, const std::vector<std::vector<std::int64_t>>& shapes,
                        const std::vector<std::string>& dtypes, std::uint64_t profiler_flops);

/// Bytes of one element of a profiler type name ("c10::Half", "float", "long int"); 0 for non-tensors.
int element_bytes(const std::string& dtype);

/// Links, attributes and aggregates the device events of `events` into per-step kernel records
/// (sorted by time, longest first). Device events whose operator is not in the trace keep their
/// time with no FLOPs (memory bound).
std::vector<KernelRecord> attribute_kernels(const std::vector<TraceEvent>& events, const AttributionOptions& options);

}  // namespace voxfit::cards
