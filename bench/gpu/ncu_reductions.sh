#!/bin/bash
# ncu of a few reduction kernels: speed of light, occupancy, launch, warp stalls.
set -u
IRC=${IRC:-.device-bin/irc}
for w in "$@"; do
  echo "=== $w"
  timeout 120 ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --launch-skip 1 --launch-count 2 $IRC bench bench/gpu/reductions/$w.ir --warmup 1 --rep 1 2>&1 \
    | grep -E "^  [a-z_0-9]+|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Stall|Compute \(SM\) Throughput|Grid Size|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Shared Memory Config" | head -60
done
