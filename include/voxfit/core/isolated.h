#pragma once
// A reader that may crash the process on a hostile file (HDF5's, TorchScript's) first reads it in a
// forked child: the parent learns whether the read survives before it reads the file itself.
#include <functional>
#include <memory>
#include <string>

namespace voxfit::core {

/// Runs `work` in a forked child (its stdout and stderr to /dev/null, one torch thread) and waits
/// at most `timeout_s`. Returns when the child exits normally; throws IoError "`what`crashed on it:
/// signal 11, Segmentation fault)" or "`what`hung on it: still reading after N s)" otherwise (the
/// child is killed), or naming `what` when no child can be started. `work` reports errors by
/// throwing: the child ignores them (the parent's own read names them). `fork_guard`, where given,
/// is held across the fork (a lock the reader needs consistent in the child); `in_child` runs first
/// in the child (to reset such a lock).
void survive_in_child(const std::string& what, const std::function<void()>& work, double timeout_s,
                      const std::function<std::shared_ptr<void>()>& fork_guard = {},
                      const std::function<void()>& in_child = {});

/// survive_in_child for a reader that says what it found: `work`'s return value in the child (at
/// most 4 KiB; empty when it throws) comes back to the parent. The parent can then refuse a file
/// the child refused without reading it itself.
std::string verdict_in_child(const std::string& what, const std::function<std::string()>& work, double timeout_s,
                             const std::function<std::shared_ptr<void>()>& fork_guard = {},
                             const std::function<void()>& in_child = {});

}  // namespace voxfit::core
