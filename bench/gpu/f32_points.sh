#!/usr/bin/env bash
# On the GPU machine: irc bench of every f32 GEMM shape under each spill-free mma.sync point
# (the data of the f32 tile-choice model in templates/mma_config.rs). Prints one line per shape.
# POINTS: the points to time (default: the five of run 66).
I=.device-bin/irc
POINTS=${POINTS:-"128x128x64/2x4/3 128x64x32/2x2/3 64x64x32/2x2/3 64x128x32/2x2/3 128x64x64/2x2/3"}
for f in bench/gpu/gemm/*_f32.ir bench/gpu/f32shapes/*.ir; do
  line="$f"
  for c in $POINTS; do
    t=$($I bench $f --mma-config $c 2>&1 | grep -oE 'median [0-9.]+' | cut -d' ' -f2)
    line="$line $c=$t"
  done
  echo "$line"
done
