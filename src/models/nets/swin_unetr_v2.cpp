// SwinUNETR-v2 (MONAI 1.5 `SwinUNETR(use_v2=True)`): swin_unetr with a residual conv block before
// each Swin stage, under its own name, as users ask for it.
#include "voxfit/models/nets/swin_unetr.h"

#include "../registry_support.h"

namespace voxfit::models {

// This network's registry entry: CMake lists S_entry() of every src/models/nets/S.cpp for registry()
// (generated voxfit_model_entries.h); the helpers are in registry_support.h.
ModelEntry swin_unetr_v2_entry() {
  ModelEntry e = detail::entry_for<SwinUNETROptions>(
      "swin_unetr_v2",
      "SwinUNETR-v2 (MONAI 1.5, use_v2): a residual conv block before each Swin stage, feature size 48",
      TaskKind::kSegmentation3d, ModelContext{}, 72762656, make_swin_unetr, {{"use_v2", "true"}});
  e.listing_order = 35;
  e.reference = swin_unetr_monai_reference();
  return e;
}

}  // namespace voxfit::models
