set terminal pngcairo size 1200,700 noenhanced
set output 'experiments/cards/results/h200/.predictions.png.tmp13728_3'
set title 'Predicted throughput per card'
set ylabel 'samples/s'
set logscale y
set grid ytics
set style data histograms
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set xtics rotate by -45
set key outside right
plot for [i=2:9] 'experiments/cards/results/h200/predictions.dat' using i:xtic(1) title columnheader(i)
