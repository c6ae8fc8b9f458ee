#!/usr/bin/python3
"""The model of a job's aggregated input against datapath lcores and channels (docs/protocol.md
section 22), from what bench/run job-lcores measures on one lcore: the busy cycles the datapath
spends per 4 KiB packet it aggregates ("busy cycles per packet taken in", configuration one).

Channels share nothing, so a job of C channels on L lcores runs min(C, L) engines in parallel; the
model scales one lcore's rate by them and by the measured two-lcore efficiency (job_2channels_vs_1
/ 2, or per datapath CPU-second as job_lcores.py prints it), and checks two limits a real server
has that this VM does not show: the RX queues a port gives (one per lcore) and the memory traffic
(per input byte: the NIC's DMA in, the engine's read, the sum written over the held packets, the
retained copy of 1/n, the NIC's DMA out).

  bench/channels_model.py CYCLES_PER_PACKET [GHZ=2.6] [EFFICIENCY=1.0] [RANKS=4]
"""
import math
import sys

PAYLOAD = 4096  # bytes of input per packet


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cycles = float(sys.argv[1])
    ghz = float(sys.argv[2]) if len(sys.argv) > 2 else 2.6
    eff = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    per_lcore = ghz * 1e9 / cycles * PAYLOAD * 8 / 1e9  # Gbps of input
    mem_per_byte = 1 + 1 + 1 + 1 / ranks + 1  # bytes of memory traffic per input byte
    print(f"one lcore: {cycles:.0f} cycles per {PAYLOAD} B packet at {ghz} GHz = {per_lcore:.1f} Gbps of input; "
          f"efficiency per added lcore {eff:.2f}; {mem_per_byte:.2f} B of memory traffic per input byte")
    print("| lcores = channels | Gbps of input | memory traffic GB/s |")
    print("|---|---|---|")
    for c in (1, 2, 4, 8, 12, 16):
        g = per_lcore * (1 + (c - 1) * eff)
        print(f"| {c} | {g:.0f} | {g / 8 * mem_per_byte:.0f} |")
    for name, gbps in (("4x100G", 400), ("8x100G", 800)):
        need = 1 + math.ceil((gbps / per_lcore - 1) / eff)
        print(f"{name} ({gbps} Gbps of input): {need} lcores and channels, {need} RX queues per port, "
              f"{gbps / 8 * mem_per_byte:.0f} GB/s of memory traffic")


if __name__ == "__main__":
    main()
