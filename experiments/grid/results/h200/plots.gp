set terminal pngcairo size 1100,700 noenhanced
set key outside right
set grid
set xlabel 'batch'
titles = 'fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40|fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40|fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40|fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40|fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40|fp32 none @rtx3090|fp32 none @a40|fp32 blocks @rtx3090|fp32 blocks @a40|fp16 none @rtx3090|fp16 none @a40|fp16 blocks @rtx3090|fp16 blocks @a40|bf16 none @rtx3090|bf16 none @a40|bf16 blocks @rtx3090|bf16 blocks @a40'
t(i) = system(sprintf("echo '%s' | cut -d'|' -f%d", titles, i + 1))
set output 'experiments/grid/results/h200/memory-unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=0:11] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unetr 96x96x96'
plot for [i=0:11] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/memory-unetr-128x128x128.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unetr 128x128x128 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=12:23] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 12) % 8) + 1 pt ((i - 12) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-unetr-128x128x128.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unetr 128x128x128'
plot for [i=12:23] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 12) % 8) + 1 pt ((i - 12) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/memory-swin_unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: swin_unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=24:35] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 24) % 8) + 1 pt ((i - 24) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-swin_unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: swin_unetr 96x96x96'
plot for [i=24:35] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 24) % 8) + 1 pt ((i - 24) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/memory-swin_unetr-128x128x128.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: swin_unetr 128x128x128 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=36:47] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 36) % 8) + 1 pt ((i - 36) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-swin_unetr-128x128x128.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: swin_unetr 128x128x128'
plot for [i=36:47] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 36) % 8) + 1 pt ((i - 36) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/memory-unet3d-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unet3d 96x96x96 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=48:59] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 48) % 8) + 1 pt ((i - 48) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-unet3d-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unet3d 96x96x96'
plot for [i=48:59] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 48) % 8) + 1 pt ((i - 48) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/memory-unet3d-128x128x128.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unet3d 128x128x128 (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=60:71] 'experiments/grid/results/h200/memory.dat' index i with linespoints lc ((i - 60) % 8) + 1 pt ((i - 60) % 13) + 1 title t(i)
set output 'experiments/grid/results/h200/throughput-unet3d-128x128x128.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unet3d 128x128x128'
plot for [i=60:71] 'experiments/grid/results/h200/throughput.dat' index i with linespoints lc ((i - 60) % 8) + 1 pt ((i - 60) % 13) + 1 title t(i)
