set terminal pngcairo size 1100,700 noenhanced
set key outside right
set grid
set xlabel 'batch'
titles = 'unetr 96x96x96 fp16 none @24.00 GiB'
t(i) = system(sprintf("echo '%s' | cut -d'|' -f%d", titles, i + 1))
set output 'experiments/memory/results/h200/throughput/memory.png.tmp'
set ylabel 'peak reserved (GiB)'
set title 'Peak memory against batch (horizontal: usable memory of each budget)'
plot 23.3234 lc rgb 'black' dt 2 lw 2 title '24.00 GiB usable', for [i=0:0] 'experiments/memory/results/h200/throughput/memory.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
set output 'experiments/memory/results/h200/throughput/throughput.png.tmp'
set ylabel 'samples/s'
set title 'Training throughput against batch'
plot for [i=0:0] 'experiments/memory/results/h200/throughput/throughput.dat' index i with linespoints lc ((i - 0) % 8) + 1 pt ((i - 0) % 13) + 1 title t(i)
