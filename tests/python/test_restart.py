#!/usr/bin/python3
"""One rank of checked allreduces through the appliance from Python, for as long as the appliance
sums them: inagg.Communicator (the job registered by rank 0), the same 1 MiB fp32 buffer summed
again and again, every result compared bit for bit with the rank-ordered sum (test_sums.py's
reference). Its RC retry budget outlasts an appliance restart, so the ranks go on through one.
Exit status: 0 every iteration summed right, 1 a result that is not the sum came back as one,
3 an allreduce raised InaggError (printed), 4 the pause below was never ended.

    test_restart.py --rank R --world-size N --control SOCKET --job-id ID --iterations K
                    [--pause-after I --pause-dir DIR]

With --pause-after, the rank stops after I allreduces (all of them complete and acknowledged),
creates DIR/paused.R and waits (up to 120 s) for DIR/resume before it goes on: the appliance can
be restarted while no packet of the job is in flight.
"""
import argparse
import os
import sys
import time

import inagg
from test_sums import inputs, reference

COUNT = 1 << 18  # 1 MiB of fp32


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--job-id", type=int, required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--pause-after", type=int, default=-1)
    p.add_argument("--pause-dir")
    a = p.parse_args()
    comm = inagg.Communicator(a.rank, a.world_size, control=a.control, job_id=a.job_id, dtype="fp32", message=16384,
                              payload=1024, ack_timeout_ms=250, retry=40, timeout_s=20)
    want = reference("fp32", a.world_size, COUNT).tobytes()
    for i in range(a.iterations):
        if i == a.pause_after:
            open(os.path.join(a.pause_dir, f"paused.{a.rank}"), "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(a.pause_dir, "resume")):
                if time.monotonic() > deadline:
                    print(f"stopped: rank {a.rank}: {a.pause_dir}/resume did not appear within 120 s", flush=True)
                    os._exit(4)
                time.sleep(0.05)
            print(f"resumed: after allreduce {i - 1}", flush=True)
        buf = inputs("fp32", a.rank, COUNT)
        try:
            comm.allreduce_(buf)
        except inagg.InaggError as e:
            print(f"stopped: rank {a.rank}, allreduce {i}: {e}", flush=True)
            os._exit(3)  # without waiting for the communicator's peers (they may be stuck too)
        if buf.tobytes() != want:
            bad = sum(1 for x, y in zip(buf.view("u4"), reference("fp32", a.world_size, COUNT).view("u4")) if x != y)
            print(f"WRONG: rank {a.rank}, allreduce {i}: {bad} of {COUNT} elements are not the rank-ordered sum",
                  flush=True)
            os._exit(1)
        print(f"summed: allreduce {i}", flush=True)
    comm.close()
    print(f"finished: rank {a.rank}, {a.iterations} allreduces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
