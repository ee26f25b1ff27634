#include <cstdio>

#include "voxfit/cli/commands.h"
#include "voxfit/cli/options.h"
#include "voxfit/core/error.h"
#include "voxfit/train/export.h"

namespace voxfit::cli {

int cmd_export(const Args& args) {
  CommandSpec spec{"export", "voxfit export --checkpoint RUN_DIR/best.pt --output weights.pt [--names reference|voxfit]",
                   "Writes a checkpoint's network weights as a PyTorch state dict (torch.load reads it: a dict of "
                   "name -> CPU tensor, parameters and buffers), with a sidecar weights.json naming the model, its "
                   "parameters, channels, classes and patch. UNETR and SwinUNETR keys are named as MONAI's networks "
                   "name them (load_state_dict(..., strict=False) into MONAI's class), resenc_unet's as nnU-Net's "
                   "ResidualEncoderUNet names them, aliases included (a strict load_state_dict, as nnU-Net loads "
                   "network_weights); other networks keep voxfit's names."};
  spec.options.add_options()("checkpoint", po::value<std::string>()->value_name("FILE"),
                             "a checkpoint written by voxfit train")(
      "output", po::value<std::string>()->value_name("FILE"), "the state dict to write (its folder must exist)")(
      "names", po::value<std::string>()->default_value("reference")->value_name("STYLE"),
      "reference: the reference implementation's parameter names where the network has one (MONAI's, "
      "nnU-Net's; 'monai' and 'nnunet' say the same); voxfit: voxfit's own");
  po::variables_map vm;
  if (!parse_command(spec, args, vm)) return 0;
  for (const char* k : {"checkpoint", "output"})
    if (!vm.count(k)) throw ConfigError(std::string("voxfit export: --") + k + " is required");
  const auto names = train::parse_export_names(vm["names"].as<std::string>());
  const std::string output = vm["output"].as<std::string>();
  const auto s = train::export_state_dict(vm["checkpoint"].as<std::string>(), output, names);
  std::printf("%s: %lld tensors of %s (%s names", output.c_str(), static_cast<long long>(s.tensors), s.model.c_str(),
              train::to_string(names).c_str());
  if (names == train::ExportNames::kReference)
    std::printf(", %lld renamed, %lld aliases", static_cast<long long>(s.renamed), static_cast<long long>(s.aliases));
  std::printf(")\n%s: model, parameters, channels, classes, patch\n", s.sidecar.c_str());
  return 0;
}

}  // namespace voxfit::cli
