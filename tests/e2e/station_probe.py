#!/usr/bin/python3
"""Where a host's traffic goes on the rack: run one of these in each host's namespace.
  station_probe.py recv PORT SECONDS        counts UDP datagrams to PORT; prints "received N"
  station_probe.py sniff DST_IP SECONDS     counts frames to DST_IP seen on eth0; prints "sniffed N"
  station_probe.py send DST_IP PORT COUNT   sends COUNT UDP datagrams to DST_IP:PORT
recv and sniff print "ready" once they listen."""
import socket
import struct
import sys
import time


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "recv":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", int(argv[2])))
        s.settimeout(0.1)
        print("ready", flush=True)
        n, until = 0, time.monotonic() + float(argv[3])
        while time.monotonic() < until:
            try:
                s.recv(2048)
                n += 1
            except socket.timeout:
                pass
        print(f"received {n}")
    elif mode == "sniff":
        dst = socket.inet_aton(argv[2])
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        s.bind(("eth0", 0))
        s.settimeout(0.1)
        print("ready", flush=True)
        n, until = 0, time.monotonic() + float(argv[3])
        while time.monotonic() < until:
            try:
                f = s.recv(4096)
            except socket.timeout:
                continue
            if len(f) >= 34 and struct.unpack(">H", f[12:14])[0] == 0x0800 and f[30:34] == dst:
                n += 1
        print(f"sniffed {n}")
    elif mode == "send":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(int(argv[4])):
            s.sendto(b"probe %d" % i, (argv[2], int(argv[3])))
            time.sleep(0.01)
        print(f"sent {argv[4]}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
