#include "voxfit/models/checkpoint.h"

#include <c10/util/strides.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "voxfit/core/torch_compat.h"

namespace voxfit::models {

namespace {

struct AutocastState {
  bool cpu_enabled = false, cuda_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState current() {
    AutocastState s;
    s.cpu_enabled = compat::autocast_enabled(c10::DeviceType::CPU);
    s.cuda_enabled = compat::autocast_enabled(c10::DeviceType::CUDA);
    s.cpu_dtype = compat::autocast_dtype(c10::DeviceType::CPU);
    s.cuda_dtype = compat::autocast_dtype(c10::DeviceType::CUDA);
    return s;
  }
  void apply() const {
    compat::set_autocast(c10::DeviceType::CPU, cpu_enabled, cpu_dtype);
    compat::set_autocast(c10::DeviceType::CUDA, cuda_enabled, cuda_dtype);
  }
};

// Backward may run on another thread (CUDA's autograd device threads), whose thread-local autocast
// state is off: the recomputation must see the forward's state, or it would compute in fp32.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& wanted) : previous_(AutocastState::current()) {
    wanted.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastRestore() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  AutocastState previous_;
};

struct Recompute : torch::CustomClassHolder {
  BlockFn fn;
  AutocastState autocast;
  /// Which of fn's inputs are defined: autograd cannot carry undefined tensors (e.g. the mask of
  /// an unshifted Swin stage), so only the defined ones pass through the Function.
  std::vector<bool> defined;
  size_t real_inputs = 0;  ///< defined inputs before the grad-carrying placeholder, if one was added

  std::vector<torch::Tensor> call(const std::vector<torch::Tensor>& passed) const {
    std::vector<torch::Tensor> in;
    size_t next = 0;
    for (const bool d : defined) in.push_back(d ? passed[next++] : torch::Tensor());
    return fn(in);
  }
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                c10::intrusive_ptr<Recompute> recompute) {
    std::vector<torch::Tensor> real(inputs.begin(), inputs.begin() + recompute->real_inputs);
    auto outputs = recompute->call(real);
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    std::vector<torch::Tensor> detached;
    detached.reserve(recompute->real_inputs);
    for (size_t i = 0; i < recompute->real_inputs; ++i) {
      const bool needs_grad = saved[i].requires_grad();
      detached.push_back(saved[i].detach().requires_grad_(needs_grad));
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastRestore autocast(recompute->autocast);
      outputs = recompute->call(detached);
    }
    std::vector<torch::Tensor> roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    torch::autograd::variable_list result;
    for (const auto& t : detached) result.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    result.resize(saved.size() + 1);  // the placeholder, if any, and the Recompute argument
    return result;
  }
};

// Identity whose backward hands back the gradient in the input's layout, as a leaf's
// AccumulateGrad does (the checkpointed path's input gradients come from such leaves).
struct InputLayoutGrad : torch::autograd::Function<InputLayoutGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    std::vector<int64_t> strides = x.strides().vec();
    if (!x.unsafeGetTensorImpl()->is_non_overlapping_and_dense()) {
      const auto contiguous = c10::contiguous_strides(x.sizes());
      strides.assign(contiguous.begin(), contiguous.end());
    }
    ctx->saved_data["strides"] = strides;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto strides = ctx->saved_data["strides"].toIntVector();
    if (grad[0].strides().vec() == strides) return {grad[0]};
    return {torch::empty_strided(grad[0].sizes(), strides, grad[0].options()).copy_(grad[0])};
  }
};

struct ContiguousGrad : torch::autograd::Function<ContiguousGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x.view_as(x); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grad) {
    return {grad[0].contiguous()};
  }
};

}  // namespace

torch::Tensor contiguous_grad(const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return x;
  return ContiguousGrad::apply(x);
}

std::vector<torch::Tensor> checkpoint(const BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->fn = fn;
  recompute->autocast = AutocastState::current();
  std::vector<torch::Tensor> all;
  bool any_grad = false;
  for (const auto& t : inputs) {
    recompute->defined.push_back(t.defined());
    if (!t.defined()) continue;
    all.push_back(t);
    any_grad = any_grad || t.requires_grad();
  }
  recompute->real_inputs = all.size();
  // Without an input that requires grad autograd never calls backward, and the block's own
  // parameters (which are not inputs of the Function) would get no gradient.
  if (!any_grad) all.push_back(torch::empty({0}, torch::requires_grad()));
  return CheckpointFunction::apply(at::TensorList(all), recompute);
}

torch::Tensor checkpoint(const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x) {
  return checkpoint([fn](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> { return {fn(in[0])}; },
                    {x})[0];
}

namespace {

// A checkpointed block's backward hands each input one gradient, already summed over the block's
// internal uses; the autograd engine then adds the gradients of the input's other consumers.
// Unchecked, the engine would add all of them in one buffer, in an order that depends on the
// rest of the graph, and floating-point sums of three or more terms depend on their order. An
// alias per input gives the unchecked block the same two-level sum, so gradients stay bitwise
// equal with and without checkpointing.
// It also hands the gradient back in the input's layout, as the checkpointed path does, so
// reductions downstream (bias gradients) see the same strides.
torch::Tensor alias_for_grad(const torch::Tensor& x) {
  return x.defined() && x.requires_grad() ? InputLayoutGrad::apply(x) : x;
}

}  // namespace

torch::Tensor maybe_checkpoint(bool enabled, bool training,
                               const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& x) {
  if (!training || !torch::GradMode::is_enabled()) return fn(x);
  if (enabled) return checkpoint(fn, x);
  return fn(alias_for_grad(x));
}

torch::Tensor maybe_checkpoint(bool enabled, bool training, const BlockFn& fn,
                               const std::vector<torch::Tensor>& inputs) {
  if (!training || !torch::GradMode::is_enabled()) return fn(inputs)[0];
  if (enabled) return checkpoint(fn, inputs)[0];
  std::vector<torch::Tensor> aliased;
  for (const auto& t : inputs) aliased.push_back(alias_for_grad(t));
  return fn(aliased)[0];
}

}  // namespace voxfit::models
