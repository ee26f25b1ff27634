// Anchor for the precompiled torch header shared by every voxfit target.
