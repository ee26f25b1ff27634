#pragma once
// The fused norm kernels' shapes and settings (instance_norm_launch.h, instance_norm_kernels.cuh):
// plain C++, no CUDA headers, so the CPU emulation of the kernels (tests/kernels) can use them too.
#include <cstdint>

namespace voxfit::kernels::cuda {

enum class DType { kFloat, kHalf, kBFloat16 };
enum class Act { kNone, kReLU, kLeakyReLU };

/// An [N, C, spatial...] tensor flattened to [N, C, S]: NCDHW (channel planes of S contiguous
/// elements) or channels-last (NDHWC: S rows of C contiguous channels). `samples` > 1 (NCDHW batch
/// norm): each of the n x c instances is that many planes of S, C x S elements apart (the samples of
/// a batch), so an instance has S x samples rows (instance_rows).
struct NormShape {
  int64_t n = 0, c = 0, s = 0;
  bool channels_last = false;
  int64_t samples = 1;
};

#ifdef __CUDACC__
#define VOXFIT_HOST_DEVICE __host__ __device__
#else
#define VOXFIT_HOST_DEVICE
#endif

/// The rows one instance's statistics are over (host and kernels).
inline VOXFIT_HOST_DEVICE int64_t instance_rows(const NormShape& shape) { return shape.s * shape.samples; }

struct ActSpec {
  Act act = Act::kNone;
  float slope = 0.01f;  ///< LeakyReLU's negative slope
};

/// The kernels' view of a [N, C, spatial...] tensor of `s` spatial elements a channel. `batch`
/// (batch norm's statistics): the whole batch is one instance of N x S rows a channel: in
/// channels-last memory those rows are S x N consecutive rows of C channels; in NCDHW memory they are
/// the channel's N planes of S, one a sample.
inline NormShape norm_shape(int64_t n, int64_t c, int64_t s, bool channels_last, bool batch) {
  NormShape shape;
  shape.n = batch ? 1 : n;
  shape.c = c;
  shape.s = batch && channels_last ? n * s : s;
  shape.channels_last = channels_last;
  shape.samples = batch && !channels_last ? n : 1;
  return shape;
}

}  // namespace voxfit::kernels::cuda
