"""UDP round trips through the virtual rack, for bench/idle.sh and tests (no ping binary needed):
   udp_rtt.py echo ADDRESS PORT SECONDS   answer every datagram for SECONDS
   udp_rtt.py ping ADDRESS PORT COUNT     print the median round trip in ms of COUNT datagrams"""
import socket
import statistics
import sys
import time

role, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if role == "echo":
    s.bind((addr, port))
    s.settimeout(0.2)
    end = time.monotonic() + n
    while time.monotonic() < end:
        try:
            data, peer = s.recvfrom(2048)
            s.sendto(data, peer)
        except socket.timeout:
            pass
    sys.exit(0)
s.settimeout(0.5)
rtts, deadline = [], time.monotonic() + 20
while len(rtts) < n:
    if time.monotonic() > deadline:
        sys.exit(f"udp_rtt: only {len(rtts)} of {int(n)} answers from {addr}:{port} within 20 s")
    t0 = time.monotonic()
    s.sendto(b"x" * 64, (addr, port))
    try:
        s.recvfrom(2048)
    except socket.timeout:
        continue  # the echo side may not be up yet
    rtts.append((time.monotonic() - t0) * 1e3)
    time.sleep(0.02)
print(f"{statistics.median(rtts):.3f}")
