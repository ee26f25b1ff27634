#!/usr/bin/env bash
# Copies what GPU-machine runs read into the git-ignored .shared-data/ (carried with the device
# tool; ../shared does not travel): the real TotalSegmentator volumes and Debian's demo MRI.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .shared-data/data .shared-data/demo
rm -rf .shared-data/data/totalsegmentator && cp -r ../shared/data/totalsegmentator .shared-data/data/ && chmod -R u+w .shared-data
cp -u /usr/share/doc/insighttoolkit5-examples/examples/Data/KmeansTest_* .shared-data/demo/ 2>/dev/null || true
du -sh .shared-data
