/* Model of the rotated-placeholder all-gather (docs/protocol.md section 20, a design the engine
   does not implement yet), for the spin model checker: N = 3 ranks in a ring r -> r+1 through one
   appliance; the buffer is 3 shards, shard s rank s's, each cut into K chunks of one packet. In
   round k rank r WRITEs chunk k of its own shard first (position 0, real data), then a placeholder
   for shard r - 1 (position 1): the shard its successor lacks. Sequence q = 2k + position on its
   connection.
   - The appliance forwards a position-0 packet unchanged and keeps a copy of it (slot (s, k));
   - it writes that copy into the placeholder for the same shard and chunk, which rank s + 1 sends
     on its connection into rank s + 2, and releases it then.
   Every connection releases in sequence order (a packet behind a waiting placeholder waits with
   it). Retransmissions: a position-0 packet forwarded again, a placeholder answered from the copy.
   Window W per connection, N rounds of copies per shard, go-back-N senders whose ACK timer fires
   at quiescence, cumulative ACKs; every link lossy, at most LMAX losses in all. A packet's payload
   is the shard it carries, plus 1 (0: a placeholder's zeros).
   Claims: (a) a receiver accepts, in order, at position 0 its predecessor's shard and at position 1
   the shard before that, never zeros; (b) under the window contract no packet's copy slot still
   holds an older round whose placeholder is not out; (c) liveness: no non-progress cycle under
   weak fairness.
   Mutations (-DMUTATION=M), each caught by the claim named:
   1  a placeholder released before the copy is in (its zeros): (a)
   2  no copy kept for a placeholder's retransmission: (c)
   3  N - 1 rounds of copies per shard: (b) */
#ifndef W
#define W 1
#endif
#ifndef K
#define K 2
#endif
#ifndef LMAX
#define LMAX 1
#endif
#ifndef MUTATION
#define MUTATION 0
#endif
#define N 3
#ifndef RS
#if MUTATION == 3
#define RS (N - 1)
#else
#define RS N                        /* rounds of copies per shard */
#endif
#endif
#define Q (2 * K)
#define SHARD(r, q) (((q) % 2 == 0) -> (r) : (((r) + N - 1) % N))
#define SLOT(s, k) ((s) * RS + (k) % RS)

byte losses = 0;
chan up[N] = [2] of { byte };
bit tmo[N];
byte finished = 0;
byte expect[N];
byte acked[N];

inline deliver(d, q, v) {
  if
  :: losses < LMAX -> losses++
  :: true ->
     if
     :: q == expect[d] -> assert(v == SHARD((d + N - 1) % N, q) + 1); expect[d]++
     :: else -> skip
     fi;
     if :: acked[(d + N - 1) % N] = expect[d] :: losses < LMAX -> losses++ fi
  fi
}

proctype Timer() {
end: do
  :: finished == N -> break
  :: timeout && finished < N -> atomic { tmo[0] = 1; tmo[1] = 1; tmo[2] = 1 }
  od
}

proctype Sender(byte r; chan out) {
  byte base = 0, nxt = 0;
  xs out;
  do
  :: base == Q -> finished++; break
  :: nxt < base + W && nxt < Q -> if :: out!nxt :: losses < LMAX -> losses++ fi; nxt++
  :: tmo[r] -> tmo[r] = 0; nxt = base
  :: acked[r] > base -> progress: base = acked[r]; if :: nxt < base -> nxt = base :: else fi
  od
}

proctype Appliance() {
  byte r, q, k, s, i;
  byte ep[N * RS];
  bit copy[N * RS], out[N * RS];  /* the copy is in; the placeholder it fills is out */
  byte got[N], crel[N];
end: do
  :: atomic {
     (nempty(up[0]) || nempty(up[1]) || nempty(up[2]));
     if :: up[0]?q -> r = 0 :: up[1]?q -> r = 1 :: up[2]?q -> r = 2 fi;
     k = q / 2; s = SHARD(r, q); i = SLOT(s, k);
     if
     :: q < crel[r] ->                              /* released already: a retransmission */
        if
        :: q % 2 == 0 -> deliver((r + 1) % N, q, s + 1)
#if MUTATION == 2
        :: q % 2 == 1 -> skip
#else
        :: q % 2 == 1 && copy[i] && ep[i] == k -> deliver((r + 1) % N, q, s + 1)   /* from the copy */
        :: q % 2 == 1 && !(copy[i] && ep[i] == k) -> skip
#endif
        fi
     :: q >= crel[r] ->
        if
        :: q % 2 == 0 ->                            /* real data: keep a copy */
           if
           :: !copy[i] -> copy[i] = 1; ep[i] = k; out[i] = 0
           :: copy[i] && ep[i] == k -> skip
           :: copy[i] && ep[i] < k ->
              if
              :: out[i] -> ep[i] = k; out[i] = 0
              :: else -> assert(false)              /* (b): the older copy is still needed */
              fi
           :: copy[i] && ep[i] > k -> assert(false) /* (b) */
           fi
        :: else -> skip
        fi;
        got[r] = got[r] | (1 << q)
     fi;
     /* Each connection in sequence order: real data at once, a placeholder once its copy is in. */
     r = 0;
     do
     :: r < N ->
        do
        :: crel[r] < Q && (got[r] & (1 << crel[r])) && crel[r] % 2 == 0 ->
             deliver((r + 1) % N, crel[r], r + 1); crel[r]++
#if MUTATION == 1
        :: crel[r] < Q && (got[r] & (1 << crel[r])) && crel[r] % 2 == 1 ->
             i = SLOT((r + N - 1) % N, crel[r] / 2);
             if
             :: copy[i] && ep[i] == crel[r] / 2 -> out[i] = 1; deliver((r + 1) % N, crel[r], (r + N - 1) % N + 1)
             :: else -> deliver((r + 1) % N, crel[r], 0)
             fi;
             crel[r]++
#else
        :: crel[r] < Q && (got[r] & (1 << crel[r])) && crel[r] % 2 == 1 &&
           copy[SLOT((r + N - 1) % N, crel[r] / 2)] && ep[SLOT((r + N - 1) % N, crel[r] / 2)] == crel[r] / 2 ->
             out[SLOT((r + N - 1) % N, crel[r] / 2)] = 1;
             deliver((r + 1) % N, crel[r], (r + N - 1) % N + 1); crel[r]++
#endif
        :: else -> break
        od;
        r++
     :: else -> break
     od
     }
  od
}

init {
  atomic {
    run Timer(); run Appliance();
    run Sender(0, up[0]); run Sender(1, up[1]); run Sender(2, up[2])
  }
}
