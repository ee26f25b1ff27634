#include "voxfit/core/block_scope.h"

#include <atomic>

namespace voxfit::core {

namespace {
std::atomic<BlockObserver*> g_observer{nullptr};
}  // namespace

BlockObserver* set_block_observer(BlockObserver* observer) { return g_observer.exchange(observer); }

BlockObserver* block_observer() { return g_observer.load(std::memory_order_acquire); }

BlockScope::BlockScope(const char* kind, int index) : observer_(block_observer()) {
  if (observer_ == nullptr) return;
  name_ = index < 0 ? std::string(kind) : std::string(kind) + std::to_string(index);
  observer_->enter_block(name_);
}

BlockScope::~BlockScope() {
  if (observer_ != nullptr) observer_->leave_block(name_);
}

}  // namespace voxfit::core
