#!/usr/bin/env bash
# Copies what GPU-machine runs read and the project does not hold into the git-ignored
# .shared-data/ (carried with the device tool; ../shared does not travel): Debian's demo MRI and
# the peers (../shared/peers: MONAI, peer_seg.py, peer_ref.py). The real CT and MR volumes travel
# with the project (tests/volumes/).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .shared-data/demo
rm -rf .shared-data/data .shared-data/peers && cp -r ../shared/peers .shared-data/ && chmod -R u+w .shared-data
cp -u /usr/share/doc/insighttoolkit5-examples/examples/Data/KmeansTest_* .shared-data/demo/ 2>/dev/null || true
du -sh .shared-data
