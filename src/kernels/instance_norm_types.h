#pragma once
// The fused norm kernels' shapes and settings (instance_norm_launch.h, instance_norm_kernels.cuh):
// plain C++, no CUDA headers, so the CPU emulation of the kernels (tests/kernels) can use them too.
#include <cstdint>

namespace voxfit::kernels::cuda {

enum class DType { kFloat, kHalf, kBFloat16 };
enum class Act { kNone, kReLU, kLeakyReLU };

/// An [N, C, spatial...] tensor flattened to [N, C, S]: NCDHW (channel planes of S contiguous
/// elements) or channels-last (NDHWC: S rows of C contiguous channels).
struct NormShape {
  int64_t n = 0, c = 0, s = 0;
  bool channels_last = false;
};

struct ActSpec {
  Act act = Act::kNone;
  float slope = 0.01f;  ///< LeakyReLU's negative slope
};

/// The kernels' view of a [N, C, spatial...] tensor of `s` spatial elements a channel. `batch`
/// (batch norm's statistics): the whole batch is one instance of N x S rows, which is the memory as
/// it stands for channels-last, and for NCDHW with one sample or one channel (the caller checks).
inline NormShape norm_shape(int64_t n, int64_t c, int64_t s, bool channels_last, bool batch) {
  NormShape shape;
  shape.n = batch ? 1 : n;
  shape.c = c;
  shape.s = batch ? n * s : s;
  shape.channels_last = channels_last;
  return shape;
}

}  // namespace voxfit::kernels::cuda
