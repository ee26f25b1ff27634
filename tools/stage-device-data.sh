#!/usr/bin/env bash
# Copies what GPU-machine runs read and the project does not hold into the git-ignored
# .shared-data/ (carried with the device tool; ../shared does not travel): Debian's demo MRI, the
# peers (../shared/peers: MONAI, peer_seg.py, peer_ref.py) and, for MONAI's NIfTI reader in
# experiments/learning/peer_learn.py, nibabel, packaging and einops (pure-Python wheels, unpacked
# into .shared-data/pylib). The real CT and MR volumes travel with the project (tests/volumes/).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .shared-data/demo
rm -rf .shared-data/data .shared-data/peers && cp -r ../shared/peers .shared-data/ && chmod -R u+w .shared-data
cp -u /usr/share/doc/insighttoolkit5-examples/examples/Data/KmeansTest_* .shared-data/demo/ 2>/dev/null || true
if [ ! -d .shared-data/pylib/nibabel ]; then
  rm -rf .shared-data/pylib /tmp/voxfit-pylib && mkdir -p .shared-data/pylib
  if python3 -m pip download -q --no-deps --only-binary=:all: nibabel packaging einops -d /tmp/voxfit-pylib; then
    for w in /tmp/voxfit-pylib/*.whl; do python3 -m zipfile -e "$w" .shared-data/pylib; done
    # Their own test data would only count against the device tool's 64 MiB carry.
    find .shared-data/pylib -type d -name tests -prune -exec rm -rf {} +
  else
    echo "stage-device-data: no nibabel from PyPI: experiments/learning/peer_learn.py will not read NIfTI" >&2
  fi
fi
du -sh .shared-data
