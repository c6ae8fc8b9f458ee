#!/usr/bin/python3
"""BPF_PROG_TEST_RUN fixtures for the head program (Katran's BpfTester idea): a sequence of steps,
each an input frame built by scapy, the verdict the program must return, the frame it must leave
(built here by scapy too, with sums from a plain scalar loop) and the counters it must move. The
steps run in order against one loaded program, so slot state carries from step to step.

Output, one record per line, fields separated by '|':
  identity|HEAD_IP|HEAD_MAC|PORT
  job|HEAD JOB TEXT, lines joined by ';'|THE JOB'S MAC KEY, 32 hex digits
  step|NAME|COUNTER_ROW|COUNTERS+THAT+MOVE|VERDICT|INPUT_HEX|EXPECTED_HEX ('-': unchanged, '': not checked)

Usage: gen_head_fixtures.py OUT.txt
"""
import random
import sys

import logging
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import Ether, Dot1Q, IP, UDP, Raw  # noqa: E402

sys.path.insert(0, __import__("os").path.dirname(__file__))
from xagg_scapy import Xagg, DATA, RESULT, PORT, KEYS, values_bytes, scalar_sum, xagg_mac  # noqa: E402

HEAD_IP, HEAD_MAC = "10.77.0.201", "02:77:00:00:01:01"
PARENT_IP, PARENT_MAC = "10.77.0.203", "02:77:00:00:01:03"
OTHER_HEAD_IP = "10.77.0.202"
GROUP1, GROUP1_MAC = "239.77.0.1", "01:00:5e:4d:00:01"
GROUP2, GROUP2_MAC = "239.77.0.2", "01:00:5e:4d:00:02"
NO_JOB_ROW = 256  # XAGG_MAX_JOBS: the counters of packets of no known job

rng = random.Random(4792)
records = [f"identity|{HEAD_IP}|{HEAD_MAC}|{PORT}"]


def worker(rank):
    return f"10.77.0.{rank + 1}", f"02:77:00:00:00:{rank + 1:02x}"


def member_lines(n):
    return "".join(f";member = {r}, {worker(r)[0]}, {worker(r)[1]}" for r in range(n))


# Job 1: a top head of 3 workers. Job 2: a head of 2 workers under a parent, rank 1 there. Every
# member's bound address is given (the head takes a rank's DATA only from its IP and answers it
# only at its IP and MAC): workers 10.77.0.1... Each job has a random MAC key; the key_file line is
# never read (the test hands the key to the program itself).
KEYS[1] = bytes(rng.randrange(256) for _ in range(16))
KEYS[2] = bytes(rng.randrange(256) for _ in range(16))
OTHER_KEY = bytes(rng.randrange(256) for _ in range(16))
records.append("job|id = 1;members = 3;values = 8;window = 2;total_weight = 3;group = " + GROUP1 + member_lines(3) +
               ";key_file = /nonexistent/job1.key|" + KEYS[1].hex())
records.append("job|id = 2;members = 2;values = 4;window = 1;total_weight = 4;group = " + GROUP2 +
               f";parent = {PARENT_IP};parent_group = {GROUP1};parent_rank = 1;parent_mac = {PARENT_MAC}" +
               member_lines(2) + ";key_file = /nonexistent/job2.key|" + KEYS[2].hex())


def frame(src_mac, dst_mac, src_ip, dst_ip, xagg, values, vlan=None, ip_id=None, tos=0, sport=PORT):
    eth = Ether(src=src_mac, dst=dst_mac)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    ip = IP(src=src_ip, dst=dst_ip, ttl=61, flags="DF", tos=tos, id=ip_id if ip_id is not None else rng.randrange(65536))
    return eth / ip / UDP(sport=sport, dport=PORT) / xagg / Raw(values_bytes(values))


def data(job, rank, seq, values, weight=1, src=None, dst_ip=HEAD_IP, vlan=None, sport=PORT, mac=None):
    ip, eth = src or worker(rank)
    return frame(eth, HEAD_MAC, ip, dst_ip, Xagg(type=DATA, job=job, rank=rank, seq=seq, weight=weight, mac=mac),
                 values, vlan=vlan, sport=sport)


def resigned(pkt, key):
    """pkt with its MAC made under another key."""
    b = bytearray(bytes(pkt))
    x = len(b) - len(bytes(pkt[Xagg]))
    b[x + 16:x + 24] = xagg_mac(key, bytes(b[x:]))
    return Ether(bytes(b))


def patched(pkt, at, new):
    """pkt with bytes at offset `at` of its Xagg header (24: the first value) changed after it was
    signed, its MAC left as it was."""
    b = bytearray(bytes(pkt))
    x = len(b) - len(bytes(pkt[Xagg]))
    b[x + at:x + at + len(new)] = new
    return Ether(bytes(b))


def rewritten(inp, dst_mac, dst_ip, type_, rank, weight, values):
    """What the head leaves in the frame: readdressed from the head, TTL 64, both ports the tier's,
    UDP checksum 0, the header's type/rank/weight set, the values replaced, the MAC made under the
    job's key; IP id, TOS, DF and any VLAN tag kept."""
    x = inp[Xagg]
    eth = Ether(src=HEAD_MAC, dst=dst_mac)
    if Dot1Q in inp:
        eth = eth / Dot1Q(vlan=inp[Dot1Q].vlan)
    ip = IP(src=HEAD_IP, dst=dst_ip, ttl=64, flags=inp[IP].flags, tos=inp[IP].tos, id=inp[IP].id)
    out = eth / ip / UDP(sport=PORT, dport=PORT, chksum=0) / \
        Xagg(type=type_, job=x.job, rank=rank, seq=x.seq, weight=weight) / Raw(values_bytes(values))
    return bytes(out)


def step(name, row, counters, verdict, inp, expected=""):
    b = bytes(inp)
    exp = "-" if expected == "-" else (expected.hex() if expected else "")
    records.append(f"step|{name}|{row}|{'+'.join(counters)}|{verdict}|{b.hex()}|{exp}")


def vec(n, lo=-1000, hi=1000):
    return [rng.randint(lo, hi) for _ in range(n)]


# --- packets that are not the head's business, or are broken
step("UDP to another port passes untouched", NO_JOB_ROW, [], "XDP_PASS",
     Ether(src=worker(0)[1], dst=HEAD_MAC) / IP(src=worker(0)[0], dst=HEAD_IP) / UDP(sport=5000, dport=53) / Raw(b"q" * 20), "-")
step("ARP passes untouched", NO_JOB_ROW, [], "XDP_PASS",
     Ether(src=worker(0)[1], dst="ff:ff:ff:ff:ff:ff", type=0x0806) / Raw(b"\x00" * 28), "-")
step("DATA to another head's address passes (flooded by the fabric)", NO_JOB_ROW, [], "XDP_PASS",
     data(1, 0, 0, vec(8), dst_ip=OTHER_HEAD_IP), "-")
step("header cut short is malformed", NO_JOB_ROW, ["malformed"], "XDP_DROP",
     Ether(src=worker(0)[1], dst=HEAD_MAC) / IP(src=worker(0)[0], dst=HEAD_IP) / UDP(sport=PORT, dport=PORT) / Raw(b"\x01\x01\x00"))
step("count not a multiple of 4 is malformed", NO_JOB_ROW, ["malformed"], "XDP_DROP", data(1, 0, 0, vec(6)))
step("UDP length beyond the frame is malformed", NO_JOB_ROW, ["malformed"], "XDP_DROP",
     Ether(bytes(data(1, 0, 0, vec(8)))[:-8]))
bad_version = data(1, 0, 0, vec(8))
bad_version[Xagg].version = 9
step("unknown version is malformed", NO_JOB_ROW, ["malformed"], "XDP_DROP", bad_version)
# The unicast fan-out's mark (XAGG_FANOUT_TYPE, 0x80) is the head's own: from outside it would have
# the TC program fan a forged result out to the members.
fanout_mark = data(1, 0, 0, vec(8), dst_ip=OTHER_HEAD_IP)
fanout_mark[Xagg].type = 0x80
step("the unicast fan-out's mark from outside is malformed", NO_JOB_ROW, ["malformed"], "XDP_DROP", fanout_mark)
step("a job this head does not have", NO_JOB_ROW, ["unknown_job"], "XDP_DROP", data(7, 0, 0, vec(8)))
step("rank outside the job's members", 1, ["rx_data", "bad_rank"], "XDP_DROP", data(1, 3, 0, vec(8)))
step("weight 0", 1, ["rx_data", "bad_rank"], "XDP_DROP", data(1, 0, 0, vec(8), weight=0))
step("more values than the job's packets carry", 1, ["rx_data", "bad_count"], "XDP_DROP", data(1, 0, 0, vec(12)))
step("forged DATA: rank 0 from rank 1's address", 1, ["rx_data", "wrong_source"], "XDP_DROP",
     data(1, 0, 0, vec(8), src=worker(1)))
step("forged DATA: rank 0 from a host that is no member", 1, ["rx_data", "wrong_source"], "XDP_DROP",
     data(1, 0, 0, vec(8), src=("10.77.0.99", "02:77:00:00:00:99")))
step("forged DATA: rank 0's address but another UDP port", 1, ["rx_data", "wrong_source"], "XDP_DROP",
     data(1, 0, 0, vec(8), sport=5555))

# --- job 1, chunk 0: three members, a duplicate in between, the last one completes
v = {r: vec(8) for r in range(3)}
step("chunk 0: rank 0 is held", 1, ["rx_data", "added"], "XDP_DROP", data(1, 0, 0, v[0]))
step("chunk 0: rank 0 again (other values) is not added twice", 1, ["rx_data", "duplicates"], "XDP_DROP",
     data(1, 0, 0, vec(8)))
step("chunk 0: rank 2 is held", 1, ["rx_data", "added"], "XDP_DROP", data(1, 2, 0, v[2]))
# Forged DATA from a member's own address and port: without the job's key it changes nothing. The
# slot is unchanged: rank 1's real DATA below is still added, and the sum has none of these values.
step("forged DATA: rank 1's address and port, a MAC of zeros", 1, ["rx_data", "bad_mac"], "XDP_DROP",
     data(1, 1, 0, vec(8), mac=b"\0" * 8))
step("forged DATA: rank 1's address and port, a MAC under another key", 1, ["rx_data", "bad_mac"], "XDP_DROP",
     resigned(data(1, 1, 0, vec(8)), OTHER_KEY))
step("forged DATA: rank 1's real DATA with a value changed in flight", 1, ["rx_data", "bad_mac"], "XDP_DROP",
     patched(data(1, 1, 0, v[1]), 24 + 4 * 5, values_bytes([v[1][5] + 1000])))
step("forged DATA: rank 1's real DATA with its weight changed in flight", 1, ["rx_data", "bad_mac"], "XDP_DROP",
     patched(data(1, 1, 0, v[1]), 12, (7).to_bytes(4, "big")))
sum0 = scalar_sum([v[0], v[1], v[2]])
last = data(1, 1, 0, v[1])
step("chunk 0: rank 1 completes it: the sum goes to the group", 1, ["rx_data", "added", "completed", "results_sent"],
     "XDP_TX", last, rewritten(last, GROUP1_MAC, GROUP1, RESULT, 0, 3, sum0))
late = data(1, 2, 0, vec(8))
step("chunk 0: rank 2 asks again: answered alone from the retained sum", 1, ["rx_data", "retained_answers"],
     "XDP_TX", late, rewritten(late, worker(2)[1], worker(2)[0], RESULT, 0, 3, sum0))
# A repeat from rank 2's IP but another station's Ethernet address (a host that forged the IP and
# replayed rank 2's DATA): the answer still goes to rank 2's bound MAC, not to the frame's source.
steered = frame("02:66:66:66:66:66", HEAD_MAC, worker(2)[0], HEAD_IP, Xagg(type=DATA, job=1, rank=2, seq=0), v[2])
step("chunk 0: a repeat from a spoofed Ethernet source is answered at rank 2's bound address", 1,
     ["rx_data", "retained_answers"], "XDP_TX", steered, rewritten(steered, worker(2)[1], worker(2)[0], RESULT, 0, 3,
                                                                   sum0))
step("chunk 0: a repeat with a bad MAC gets no answer", 1, ["rx_data", "bad_mac"], "XDP_DROP",
     data(1, 2, 0, vec(8), mac=b"\1" * 8))

# --- chunk 1 wraps around int32 in both directions
big = {0: [2**31 - 1, -2**31, 2**31 - 5, -7] * 2, 1: [1, -1, 10, -2**31] * 2, 2: [5, -3, 2**31 - 1, 3] * 2}
step("chunk 1: rank 2 is held", 1, ["rx_data", "added"], "XDP_DROP", data(1, 2, 1, big[2]))
step("chunk 1: rank 0 is held", 1, ["rx_data", "added"], "XDP_DROP", data(1, 0, 1, big[0]))
last = data(1, 1, 1, big[1])
step("chunk 1: sums wrap like int32", 1, ["rx_data", "added", "completed", "results_sent"], "XDP_TX", last,
     rewritten(last, GROUP1_MAC, GROUP1, RESULT, 0, 3, scalar_sum([big[0], big[1], big[2]])))

# --- epochs: 4 slots (window 2); chunk 4 reuses chunk 0's final slot
v4 = {r: vec(8) for r in range(3)}
step("chunk 4 (next epoch of a final slot) starts it afresh", 1, ["rx_data", "added"], "XDP_DROP", data(1, 0, 4, v4[0]))
step("chunk 0 now is stale", 1, ["rx_data", "stale"], "XDP_DROP", data(1, 1, 0, vec(8)))
step("chunk 8 while chunk 4 collects is ahead of the window", 1, ["rx_data", "ahead"], "XDP_DROP", data(1, 1, 8, vec(8)))
step("chunk 2 (a slot not used yet) is accepted", 1, ["rx_data", "added"], "XDP_DROP", data(1, 0, 2, vec(8)))
step("chunk 4 with another count than the slot's", 1, ["rx_data", "bad_count"], "XDP_DROP", data(1, 1, 4, vec(4)))
step("chunk 4: rank 1 held (VLAN tagged)", 1, ["rx_data", "added"], "XDP_DROP", data(1, 1, 4, v4[1], vlan=77))
last = data(1, 2, 4, v4[2], vlan=77)
step("chunk 4: completes; the VLAN tag stays", 1, ["rx_data", "added", "completed", "results_sent"], "XDP_TX", last,
     rewritten(last, GROUP1_MAC, GROUP1, RESULT, 0, 3, scalar_sum([v4[0], v4[1], v4[2]])))

# --- job 2: a head with a parent
w = {r: vec(4) for r in range(2)}
part = scalar_sum([w[0], w[1]])
step("job 2, chunk 0: rank 0 is held", 2, ["rx_data", "added"], "XDP_DROP", data(2, 0, 0, w[0]))
last = data(2, 1, 0, w[1])
step("job 2, chunk 0: complete: the partial sum goes up with weight 2 as rank 1", 2,
     ["rx_data", "added", "completed", "up_sent"], "XDP_TX", last,
     rewritten(last, PARENT_MAC, PARENT_IP, DATA, 1, 2, part))
again = data(2, 0, 0, vec(4))
step("job 2, chunk 0: a member asks again before the parent answered: sent up again", 2,
     ["rx_data", "up_resent"], "XDP_TX", again, rewritten(again, PARENT_MAC, PARENT_IP, DATA, 1, 2, part))
final = scalar_sum([part, vec(4)])
forged = frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=0, weight=4, mac=b"\0" * 8),
               vec(4))
step("job 2: a RESULT from the parent's address and port with a bad MAC is dropped", 2, ["rx_result", "bad_mac"],
     "XDP_DROP", forged)
step("job 2: the parent's RESULT under another job's key is dropped", 2, ["rx_result", "bad_mac"], "XDP_DROP",
     resigned(frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=0, weight=4), final),
              KEYS[1]))
spoof = frame(worker(3)[1], HEAD_MAC, worker(3)[0], HEAD_IP, Xagg(type=RESULT, job=2, seq=0, weight=4), final)
step("job 2: a RESULT to us not from the parent", 2, ["wrong_source"], "XDP_DROP", spoof)
spoof_port = frame(PARENT_MAC, HEAD_MAC, PARENT_IP, HEAD_IP, Xagg(type=RESULT, job=2, seq=0, weight=4), final, sport=5555)
step("job 2: a RESULT to us from the parent's address but another port", 2, ["wrong_source"], "XDP_DROP", spoof_port)
spoof_group = frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=0, weight=4), final,
                    sport=5555)
step("job 2: a RESULT to the parent's group from its address but another port is not the parent's", 2, [],
     "XDP_PASS", spoof_group, "-")
res = frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=0, weight=4), final)
step("job 2, chunk 0: the parent's result goes down to the group", 2,
     ["rx_result", "parent_results", "results_sent"], "XDP_TX", res, rewritten(res, GROUP2_MAC, GROUP2, RESULT, 0, 4, final))
step("job 2, chunk 0: the parent's result again is dropped", 2, ["rx_result", "parent_duplicates"], "XDP_DROP", res)
late = data(2, 1, 0, vec(4))
step("job 2, chunk 0: a late member gets the final sum, not the partial", 2, ["rx_data", "retained_answers"], "XDP_TX",
     late, rewritten(late, worker(1)[1], worker(1)[0], RESULT, 0, 4, final))
early = frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=1, weight=4), vec(4))
step("job 2: a parent result for a chunk we never sent up", 2, ["rx_result", "stale"], "XDP_DROP", early)
w1 = {r: vec(4) for r in range(2)}
step("job 2, chunk 1: rank 0 is held", 2, ["rx_data", "added"], "XDP_DROP", data(2, 0, 1, w1[0]))
early = frame(PARENT_MAC, GROUP1_MAC, PARENT_IP, GROUP1, Xagg(type=RESULT, job=2, seq=1, weight=4), vec(4))
step("job 2: a parent result for a slot still collecting", 2, ["rx_result", "stale"], "XDP_DROP", early)
last = data(2, 1, 1, w1[1])
step("job 2, chunk 1: complete: up to the parent", 2, ["rx_data", "added", "completed", "up_sent"], "XDP_TX", last,
     rewritten(last, PARENT_MAC, PARENT_IP, DATA, 1, 2, scalar_sum([w1[0], w1[1]])))
step("job 2: chunk 3 while chunk 1 (same slot) waits for the parent is ahead", 2, ["rx_data", "ahead"], "XDP_DROP",
     data(2, 0, 3, vec(4)))
other = frame("02:77:00:00:01:02", GROUP1_MAC, OTHER_HEAD_IP, GROUP1, Xagg(type=RESULT, job=1, seq=0, weight=3), vec(8))
step("another head's multicast result passes (not joined: the stack drops it)", 1, [], "XDP_PASS", other, "-")

with open(sys.argv[1], "w") as f:
    f.write("\n".join(records) + "\n")
