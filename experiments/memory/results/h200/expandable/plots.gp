set terminal pngcairo size 1100,700 noenhanced
set key outside right
set grid
set xlabel 'batch'
titles = 'fp16 none @24.00 GiB|fp16 none @48.00 GiB|fp16 none @24.00 GiB|fp16 none @48.00 GiB'
t(i) = system(sprintf("echo '%s' | cut -d'|' -f%d", titles, i + 1))
set output 'experiments/memory/results/h200/expandable/memory-unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.3234 lc rgb 'black' dt 2 lw 2 title '24.00 GiB usable', 47.3234 lc rgb 'black' dt 3 lw 2 title '48.00 GiB usable', for [i=0:1] 'experiments/memory/results/h200/expandable/memory.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/memory/results/h200/expandable/throughput-unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: unetr 96x96x96'
plot for [i=0:1] 'experiments/memory/results/h200/expandable/throughput.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/memory/results/h200/expandable/memory-swin_unetr-96x96x96.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch: swin_unetr 96x96x96 (horizontal: usable memory of each budget)'
plot 23.3234 lc rgb 'black' dt 2 lw 2 title '24.00 GiB usable', 47.3234 lc rgb 'black' dt 3 lw 2 title '48.00 GiB usable', for [i=2:3] 'experiments/memory/results/h200/expandable/memory.dat' index i with linespoints lc ((i - 2) % 8) + 1 pt ((i - 2) % 13) + 1 title t(i)
set output 'experiments/memory/results/h200/expandable/throughput-swin_unetr-96x96x96.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch: swin_unetr 96x96x96'
plot for [i=2:3] 'experiments/memory/results/h200/expandable/throughput.dat' index i with linespoints lc ((i - 2) % 8) + 1 pt ((i - 2) % 13) + 1 title t(i)
