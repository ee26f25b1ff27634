#pragma once
// Named top-level blocks of a network's forward (encoder stages, transformer blocks, decoder
// stages), marked by the networks themselves so that memory accounting can charge what each block
// leaves live for backward to that block. The networks (models) mark; the memory module observes.
// Without an observer a scope costs one atomic load.
#include <string>

namespace voxfit::core {

/// Sees every top-level block of a forward as it starts and ends (on the thread running it).
class BlockObserver {
 public:
  virtual ~BlockObserver() = default;
  virtual void enter_block(const std::string& name) = 0;
  virtual void leave_block(const std::string& name) = 0;
};

/// Installs `observer` process-wide (nullptr removes it). Returns the one it replaced.
BlockObserver* set_block_observer(BlockObserver* observer);
/// The installed observer, or nullptr.
BlockObserver* block_observer();

/// Marks one top-level block for its lifetime: "encoder" + 2 -> "encoder2" (index < 0: no suffix).
class BlockScope {
 public:
  explicit BlockScope(const char* kind, int index = -1);
  ~BlockScope();
  BlockScope(const BlockScope&) = delete;
  BlockScope& operator=(const BlockScope&) = delete;

 private:
  BlockObserver* observer_;
  std::string name_;
};

}  // namespace voxfit::core
