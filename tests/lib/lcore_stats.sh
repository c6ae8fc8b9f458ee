# shellcheck shell=bash
# Reading inagg's per-lcore stats lines ("lcore N: ... COUNTER VALUE ...") from its output.
#   lcore_sum COUNTER LOG: the counter's last value on every lcore, summed
lcore_sum() {
  awk -v c="$1" '/^lcore [0-9]+:/ {for (i = 1; i <= NF; i++) if ($i == c) v[$2] = $(i + 1)} END {for (k in v) s += v[k]; print s + 0}' "$2"
}
