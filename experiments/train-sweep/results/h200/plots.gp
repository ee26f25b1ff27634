set terminal pngcairo size 1100,700 noenhanced
set key outside right
set grid
set xlabel 'batch'
titles = 'fp16 none @24.00 GiB|fp16 none @48.00 GiB|fp16 blocks @24.00 GiB|fp16 none @24.00 GiB|fp16 none @48.00 GiB|fp16 blocks @24.00 GiB'
t(i) = system(sprintf("echo '%s' | cut -d'|' -f%d", titles, i + 1))
set output 'experiments/train-sweep/results/h200/memory-unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.3234 lc rgb 'black' dt 2 lw 2 title '24.00 GiB usable', 47.2414 lc rgb 'black' dt 3 lw 2 title '48.00 GiB usable', for [i=0:2] 'experiments/train-sweep/results/h200/memory.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/train-sweep/results/h200/throughput-unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unetr 96x96x96'
plot for [i=0:2] 'experiments/train-sweep/results/h200/throughput.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/train-sweep/results/h200/memory-swin_unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: swin_unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.3234 lc rgb 'black' dt 2 lw 2 title '24.00 GiB usable', 47.2414 lc rgb 'black' dt 3 lw 2 title '48.00 GiB usable', for [i=3:5] 'experiments/train-sweep/results/h200/memory.dat' index i with linespoints lc ((i - 3) % 8) + 1 pt ((i - 3) % 13) + 1 title t(i)
set output 'experiments/train-sweep/results/h200/throughput-swin_unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: swin_unetr 96x96x96'
plot for [i=3:5] 'experiments/train-sweep/results/h200/throughput.dat' index i with linespoints lc ((i - 3) % 8) + 1 pt ((i - 3) % 13) + 1 title t(i)
