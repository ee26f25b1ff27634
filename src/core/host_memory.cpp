#include "voxfit/core/host_memory.h"

namespace voxfit {

namespace {
thread_local bool host_scope = false;
}  // namespace

HostMemoryScope::HostMemoryScope() : previous_(host_scope) { host_scope = true; }
HostMemoryScope::~HostMemoryScope() { host_scope = previous_; }

bool in_host_memory_scope() { return host_scope; }

}  // namespace voxfit
