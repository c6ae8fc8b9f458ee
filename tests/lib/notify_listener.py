#!/usr/bin/python3
"""The service manager's end of $NOTIFY_SOCKET for tests of inagg under systemd: binds the datagram
socket SOCK, then writes each datagram to TXT on a line of its own (its newlines as '|'), and
creates SOCK.ready once it listens.

  notify_listener.py SOCK TXT
"""
import socket
import sys

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[2], "w") as out:
    while True:
        out.write(s.recv(4096).decode().replace("\n", "|") + "\n")
        out.flush()
