set terminal pngcairo size 1100,700 noenhanced
set key outside right
set grid
set xlabel 'batch'
titles = 'unetr 96x96x96 fp16 blocks @rtx3090|unetr 96x96x96 fp16 blocks @a40|swin_unetr 96x96x96 fp16 none @rtx3090|swin_unetr 96x96x96 fp16 none @a40|swin_unetr 96x96x96 fp16 blocks @rtx3090|unetr 96x96x96 fp32 none @rtx3090|unetr 96x96x96 fp16 none @rtx3090|unetr 96x96x96 fp16 none @a40|swin_unetr 96x96x96 fp16 blocks @a40|unet3d 96x96x96 fp16 none @rtx3090|unet3d 96x96x96 fp16 none @a40|unet3d 96x96x96 fp16 blocks @rtx3090|unet3d 96x96x96 fp16 blocks @a40|unetr 96x96x96 bf16 none @rtx3090|unetr 96x96x96 bf16 none @a40|unetr 96x96x96 bf16 blocks @rtx3090|unetr 96x96x96 bf16 blocks @a40|swin_unetr 96x96x96 bf16 none @rtx3090|swin_unetr 96x96x96 bf16 none @a40|swin_unetr 96x96x96 bf16 blocks @rtx3090|swin_unetr 96x96x96 bf16 blocks @a40|unet3d 96x96x96 bf16 none @rtx3090|unet3d 96x96x96 bf16 none @a40|unet3d 96x96x96 bf16 blocks @rtx3090|unet3d 96x96x96 bf16 blocks @a40|unetr 128x128x128 fp16 none @rtx3090|unetr 128x128x128 fp16 none @a40|unetr 128x128x128 fp16 blocks @rtx3090|unetr 128x128x128 fp16 blocks @a40'
t(i) = system(sprintf("echo '%s' | cut -d'|' -f%d", titles, i + 1))
set output 'experiments/results/h200/grid/memory.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch (horizontal: usable memory of each budget)'
plot 23.0226 lc rgb 'black' dt 2 lw 2 title 'rtx3090 usable', 43.675 lc rgb 'black' dt 3 lw 2 title 'a40 usable', for [i=0:28] 'experiments/results/h200/grid/memory.dat' index i with linespoints lc (i % 8) + 1 pt (i % 13) + 1 title t(i)
set output 'experiments/results/h200/grid/throughput.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch'
plot for [i=0:28] 'experiments/results/h200/grid/throughput.dat' index i with linespoints lc (i % 8) + 1 pt (i % 13) + 1 title t(i)
