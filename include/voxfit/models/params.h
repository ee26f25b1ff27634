#pragma once
// A network's settable architecture parameters, declared once, in its options struct.
//
//   #define VOXFIT_UNET3D_PARAMS(X)  (each line but the last ends in a backslash)
//     X(int64_t, stages, 6, "resolution stages of the UNet ...")
//     X(std::string, norm_name, "instance_affine", "normalisation: ...")
//   struct UNet3DOptions {
//     TORCH_ARG(int64_t, in_channels) = 1;
//     VOXFIT_PARAMS(UNet3DOptions, VOXFIT_UNET3D_PARAMS)
//     ...
//   };
//
// X(type, name, default, help) declares TORCH_ARG(type, name) = default (a default with a comma
// goes in parentheses: `(std::vector<int64_t>{2, 2, 2, 2})`), and VOXFIT_PARAMS adds
// `for_each_param(f)`, which calls f(name, member pointer, help) for each in order. The registry
// entry's parameter list (`voxfit models`, the `--name` command-line options, `.ini` keys) and its
// reading of a ModelContext are generated from it (src/models/registry_support.h: entry_for<O>).
// The name is the command line's (`--norm-name`) and the reference implementation's keyword where
// it has one. Supported types: int64_t, bool, double, std::string, std::vector<int64_t>,
// std::vector<double> (lists are comma-separated on the command line). A
// parameter named `norm_name` must be a make_norm name. Integers must be >= 1 unless the struct
// declares `static int64_t minimum(const std::string& name)`.
#include <torch/arg.h>

#define VOXFIT_PARAM_FIELD(type, name, default_value, help) TORCH_ARG(type, name) = default_value;
#define VOXFIT_PARAM_VISIT(type, name, default_value, help) f(#name, &Self::name##_, help);
#define VOXFIT_PARAMS(Self_, LIST)          \
  LIST(VOXFIT_PARAM_FIELD)                  \
 public:                                    \
  template <class F>                        \
  static void for_each_param(F&& f) {       \
    using Self = Self_;                     \
    LIST(VOXFIT_PARAM_VISIT)                \
  }
