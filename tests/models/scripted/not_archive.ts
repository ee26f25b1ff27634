this is not a TorchScript archive
