/* Model of the rotated-shard reduce-scatter (docs/protocol.md section 20, a design the engine does
   not implement yet), for the spin model checker: N = 3 ranks in a ring r -> r+1 through one
   appliance; the buffer is 3 shards, shard s owned by rank s, each cut into K chunks of one
   packet. In round k rank r WRITEs chunk k of the shards it does not own: shard r+2 first
   (position 0), its successor's shard r+1 last (position 1); sequence q = 2k + position on its
   connection. Slot (s, k) collects the contributions of the two ranks that do not own shard s:
   - rank s+1's, at position 0 of its round, is added and forwarded unchanged (its receiver, rank
     s+2, writes it into scratch and never reads it as a sum);
   - rank s-1's, the last of its round, on the connection into the owner s, is held and released
     with the sum of both contributions once the slot has them.
   Every connection releases in sequence order (a packet behind a held one waits with it). A
   retransmitted contribution the slot already has is forwarded again (position 0) or answered
   from the retained sum (position 1), never added twice. Window W per connection, 2 rounds of
   slots per shard, go-back-N senders whose ACK timer fires at quiescence, cumulative ACKs; every
   link lossy (rank to appliance, appliance to rank, the ACKs), at most LMAX losses in all.
   A contribution is 1 << r; a slot adds them (so a contribution added twice shows).
   Claims: (a) an owner only accepts, in order, its shard's chunk carrying exactly the other two
   ranks' contributions; (b) under the window contract no packet arrives ahead of its slot's
   round; (c) liveness: no non-progress cycle under weak fairness (no cycle of held packets).
   Mutations (-DMUTATION=M), each caught by the claim named:
   1  the held packet released with the first contribution, not waiting for the second: (a)
   2  a retransmitted contribution added again: (a)
   3  a retransmission of a released held packet not answered from the retained sum: (c)
   4  one round of slots per shard: (b) or (c) */
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
#if MUTATION == 4
#define RS (N - 1)
#else
#define RS N                        /* rounds of slots per shard */
#endif
#endif
#define Q (2 * K)                   /* packets per connection */
#define OTHERS(s) (7 - (1 << (s)))  /* the sum a shard's owner must get */
#define SHARD(r, q) (((q) % 2 == 0) -> (((r) + 2) % N) : (((r) + 1) % N))
#define SLOT(s, k) ((s) * RS + (k) % RS)

byte losses = 0;
chan up[N] = [2] of { byte };       /* rank r -> the appliance: sequence */
bit tmo[N];
byte finished = 0;
byte expect[N];                     /* rank d's receiver: the next sequence it accepts */
byte acked[N];                      /* the latest ACK rank r's requester has had from rank r+1 */

inline deliver(d, q, v) {
  if
  :: losses < LMAX -> losses++
  :: true ->
     if
     :: q == expect[d] ->
        if
        :: q % 2 == 1 -> assert(v == OTHERS(d))  /* its own shard: the other two ranks' sum */
        :: else -> skip                          /* scratch */
        fi;
        expect[d]++
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
  byte r, q, k, s, i, d;
  byte ep[N * RS], sum[N * RS], bits[N * RS];
  bit used[N * RS], rel[N * RS];
  byte got[N];      /* per connection: the sequences that have arrived (a bit each) */
  byte crel[N];     /* per connection: the next sequence to release */
end: do
  :: atomic {
     (nempty(up[0]) || nempty(up[1]) || nempty(up[2]));
     if :: up[0]?q -> r = 0 :: up[1]?q -> r = 1 :: up[2]?q -> r = 2 fi;
     k = q / 2; s = SHARD(r, q); i = SLOT(s, k); d = (r + 1) % N;
     if
     :: q < crel[r] ->                              /* released already: a retransmission */
        if
        :: q % 2 == 0 -> deliver(d, q, 1 << r)      /* forwarded again, not added */
#if MUTATION == 3
        :: q % 2 == 1 -> skip
#else
        :: q % 2 == 1 && used[i] && ep[i] == k -> deliver(d, q, sum[i])   /* the retained sum */
        :: q % 2 == 1 && !(used[i] && ep[i] == k) -> skip
#endif
        fi
     :: q >= crel[r] ->
        if
        :: !used[i] -> used[i] = 1; ep[i] = k; sum[i] = 0; bits[i] = 0; rel[i] = 0
        :: used[i] && ep[i] == k -> skip
        :: used[i] && ep[i] < k ->                  /* a new round in a slot: the old one released? */
           if
           :: rel[i] -> ep[i] = k; sum[i] = 0; bits[i] = 0; rel[i] = 0
           :: else -> assert(false)                 /* (b): ahead of an unfinished round */
           fi
        :: used[i] && ep[i] > k -> assert(false)    /* (b): unreleased, yet its slot moved on */
        fi;
        if
        :: !(bits[i] & (1 << r)) -> bits[i] = bits[i] | (1 << r); sum[i] = sum[i] + (1 << r)
#if MUTATION == 2
        :: (bits[i] & (1 << r)) -> sum[i] = sum[i] + (1 << r)
#else
        :: (bits[i] & (1 << r)) -> skip             /* a duplicate: not added twice */
#endif
        fi;
        got[r] = got[r] | (1 << q)
     fi;
     /* Each connection releases in sequence order: a contribution at once, a held packet once
        its slot has both contributions. */
     r = 0;
     do
     :: r < N ->
        do
        :: crel[r] < Q && (got[r] & (1 << crel[r])) && crel[r] % 2 == 0 ->
             deliver((r + 1) % N, crel[r], 1 << r); crel[r]++
        :: crel[r] < Q && (got[r] & (1 << crel[r])) && crel[r] % 2 == 1 &&
#if MUTATION == 1
           sum[SLOT((r + 1) % N, crel[r] / 2)] != 0 ->
#else
           bits[SLOT((r + 1) % N, crel[r] / 2)] == OTHERS((r + 1) % N) ->
#endif
             rel[SLOT((r + 1) % N, crel[r] / 2)] = 1;
             deliver((r + 1) % N, crel[r], sum[SLOT((r + 1) % N, crel[r] / 2)]); crel[r]++
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
