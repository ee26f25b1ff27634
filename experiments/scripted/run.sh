#!/usr/bin/env bash
# Issue 49 on the GPU machine, one device call: MONAI's DynUNet and UNETR as peer_seg.py builds them,
# scripted by the device's torch (script_peers.py), trained by voxfit from the .ts files on the real
# CT (fp16, 96^3) beside the same networks in Python on the same card:
#   speed   voxfit batch 2 (networks/run.sh's speed phase) beside peer_seg.py eager and --fast
#           (torch.compile reduce-overhead + fused AdamW; + channels-last for DynUNet)
#   max     voxfit's exact largest batch under the rtx3090 budget (sweep; its results.jsonl holds the
#           measured breakdown per top-level child module) beside the peer's eager largest batch with
#           expandable segments at the same usable GiB (PEER_USABLE, 23.02)
# voxfit is built unless build-cuda/voxfit exists (a warm machine keeps the plan call's build).
# PHASES (default "speed peers peermax maxbatch", networks/run.sh's): the eager peer runs with "peers".
# NETS (default both networks, networks/run.sh's format) narrows the call to one.
# carry: .devdeps .shared-data. Logs: $OUT/networks-logs.tar.gz and $OUT/scripted.log; table last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
start=$(date +%s)
out=${OUT:-/tmp/voxfit-scripted}
mkdir -p "$out"
export PYTHONPATH=$PWD/.shared-data/peers
python3 experiments/scripted/script_peers.py . 96 >"$out/script.log" 2>&1 || { tail -5 "$out/script.log"; exit 1; }
log=$out/scripted.log
phases=${PHASES:-speed peers peermax maxbatch}
[[ " $phases " == *" peers "* ]] && {
  for pm in dynunet unetr; do  # the eager peer (the --fast one runs in networks/run.sh's peers phase)
    timeout 120 python3 .shared-data/peers/peer_seg.py --model "$pm" --patch 96 --batches 2 --no-search --steps 10 \
      --warmup 3 2>&1 | grep -E '^\{' | tail -1
  done
} >"$log"
NETS=${NETS:-dynunet_96.ts:dynunet:96 unetr_96.ts:unetr:96} PHASES="$phases" BUDGETS=rtx3090 \
  PEER_USABLE=23.02 LIMIT_S=$((${LIMIT_S:-585} - ($(date +%s) - start))) OUT=$out bash experiments/networks/run.sh
echo "## peer_seg.py eager, batch 2"
cat "$log" 2>/dev/null
