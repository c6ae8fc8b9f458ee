/* Model of a job across two racks (docs/protocol.md section 21; src/agg/engine_leaf.cpp), for
   the spin model checker: R = 4 ranks in a ring r -> r+1, ranks 0 and 1
   behind leaf 0, ranks 2 and 3 behind leaf 1, the leaves joined through a spine. Connection r is
   rank r's RC connection to rank r+1: connections 0 and 2 stay inside their racks; connection 1
   (rack 0's uplink, into rack 1) and connection 3 (rack 1's uplink, into rack 0) cross the spine.
   One packet per message, window W, 2W slots in every appliance, go-back-N senders whose ACK
   timer fires at quiescence, cumulative ACKs; every link lossy (rank to leaf, leaf to spine,
   spine to leaf, leaf to rank, the ACKs), at most LMAX losses in all.
   A packet carries its message's sequence and the set of ranks whose contributions it sums.
   - A leaf's slot collects its two ranks' packets of a message. When both are in (in sequence
     order), the uplink packet leaves for the spine carrying the rack's partial (kept for its
     retransmissions); the packet inside the rack is held.
   - The spine is an ordinary job over the two uplink connections: it sums the partials and
     releases the total into both, in sequence order, answering later retransmissions from the
     retained total.
   - The total comes down on the leaf's downlink connection (the other rack's uplink): the leaf
     passes that packet to its receiver and writes the total into the held packet, released in
     sequence order. Retransmissions: of the held connection's packet, answered from the retained
     total; of the uplink packet, the partial sent up again (the spine answers from its total);
     of the downlink packet (coming down again from the spine), passed on.
   Claims: (a) a receiver only accepts, in order, a packet that carries every rank's
   contribution; (b) under the window contract no packet arrives ahead of its slot's epoch, and a
   total never comes down before the rack's partial went up; (c) liveness: no non-progress cycle
   under weak fairness (gcc -DNP pan.c; ./pan -l -f). Safety: gcc -DSAFETY pan.c; ./pan.
   Mutations (-DMUTATION=M), each caught by the claim named:
   1  a leaf releases the held packet with the rack's partial, not waiting for the total: (a)
   2  a leaf drops a retransmitted uplink packet instead of sending the partial up again: (c)
   3  a leaf drops a downlink packet whose slot it already released: (c)
   4  the spine answers a retransmission by forwarding the partial it carries: (a)
   5  one epoch of slots (2W -> W): (c) */
#ifndef W
#define W 1
#endif
#ifndef MSGS
#define MSGS 2
#endif
#ifndef LMAX
#define LMAX 2
#endif
#ifndef MUTATION
#define MUTATION 0
#endif
#if MUTATION == 5
#define S W
#else
#define S (2 * W)
#endif
#define R 4
#define ALL 15
#define PARTIAL(l) (3 << (2 * (l)))

byte losses = 0;
inline lossy(c, m, k) { if :: c!m, k :: losses < LMAX -> losses++ fi }

chan up[R] = [2] of { byte, byte };    /* rank r -> its leaf (connection r): message, contributions */
chan lsp[2] = [2] of { byte, byte };   /* leaf l -> spine: connection 2l+1, the rack's uplink */
chan spl[2] = [2] of { byte, byte };   /* spine -> leaf l: connection 2l+3 mod 4, the leaf's downlink */

bit tmo[R];
byte finished = 0;
byte expect[R];                        /* rank d's receiver: the next message it accepts */
byte acked[R];                         /* the latest ACK rank r's requester has had from rank r+1 */

/* A leaf hands a packet to its rank d's receiver over a lossy link (its delay is the ACK's): the
   receiver accepts it in order, only with every contribution, and acknowledges cumulatively. An
   ACK subsumes every earlier one, so the ACK path is the latest ACK that got through (or was
   lost), which the requester reads when it next moves. */
inline deliver(d, m, k) {
  if
  :: losses < LMAX -> losses++
  :: true ->
     if
     :: m == expect[d] -> assert(k == ALL); expect[d]++
     :: else -> skip
     fi;
     if :: acked[(d + R - 1) % R] = expect[d] :: losses < LMAX -> losses++ fi
  fi
}

proctype Timer() {
end: do
  :: finished == R -> break
  :: timeout && finished < R -> atomic { tmo[0] = 1; tmo[1] = 1; tmo[2] = 1; tmo[3] = 1 }
  od
}

proctype Sender(byte r; chan out) {
  byte base = 0, nxt = 0;
  xs out;
  do
  :: base == MSGS -> finished++; break
  :: nxt < base + W && nxt < MSGS -> lossy(out, nxt, 1 << r); nxt++
  :: tmo[r] -> tmo[r] = 0; nxt = base
  :: acked[r] > base -> progress: base = acked[r]; if :: nxt < base -> nxt = base :: else fi
  od
}

/* The leaf of rack l: ranks a = 2l (connection a inside the rack, into rank b) and b = 2l + 1
   (connection b, the uplink); its downlink is connection (2l + 3) mod 4, into rank a. */
proctype Leaf(byte l; chan ina, inb, fromspine, tospine) {
  byte a = 2 * l, b = 2 * l + 1, m, k, s, r;
  byte ep[S], bits[S];
  bit used[S], upsent[S], got[S], rel[S];
  byte total[S];
  byte next_up = 0, next_rel = 0;
  xr ina; xr inb; xr fromspine; xs tospine;
end: do
  :: atomic {
     (nempty(ina) || nempty(inb) || nempty(fromspine));
     if
     :: ina?m, k -> r = 0
     :: inb?m, k -> r = 1
     :: fromspine?m, k -> r = 2
     fi;
     s = m % S;
     if
     :: r < 2 ->                                   /* a local rank's packet */
        if
        :: !used[s] -> used[s] = 1; ep[s] = m; bits[s] = 1 << r; upsent[s] = 0; got[s] = 0; rel[s] = 0
        :: used[s] && m == ep[s] ->
           if
           :: !(bits[s] & (1 << r)) -> bits[s] = bits[s] | (1 << r)
           :: (bits[s] & (1 << r)) && r == 0 && rel[s] -> deliver(b, m, total[s])   /* from the retained total */
           :: (bits[s] & (1 << r)) && r == 0 && !rel[s] -> skip                         /* its held copy goes on */
#if MUTATION == 2
           :: (bits[s] & (1 << r)) && r == 1 -> skip
#else
           :: (bits[s] & (1 << r)) && r == 1 && upsent[s] -> lossy(tospine, m, PARTIAL(l))  /* the partial again */
           :: (bits[s] & (1 << r)) && r == 1 && !upsent[s] -> skip
#endif
           fi
        :: used[s] && m > ep[s] ->
           if
           :: rel[s] -> ep[s] = m; bits[s] = 1 << r; upsent[s] = 0; got[s] = 0; rel[s] = 0
           :: else -> assert(false)                   /* (b): the window contract says never */
           fi
        :: used[s] && m < ep[s] -> skip                /* stale: dropped */
        fi
     :: else ->                                      /* the downlink: the total, from the spine */
        if
        :: used[s] && m == ep[s] && upsent[s] ->
           if
           :: !got[s] -> got[s] = 1; total[s] = k; deliver(a, m, k)
#if MUTATION == 3
           :: got[s] && rel[s] -> skip
           :: got[s] && !rel[s] -> deliver(a, m, k)
#else
           :: got[s] -> deliver(a, m, k)          /* answered by the spine: passed on */
#endif
           fi
        :: used[s] && m < ep[s] -> skip                /* stale: dropped */
        :: else -> assert(false)                       /* (b): a total before the partial went up */
        fi
     fi;
     /* The rack's partials go up, and the held packets out, in sequence order. */
     do
     :: next_up < MSGS && used[next_up % S] && ep[next_up % S] == next_up && bits[next_up % S] == 3 &&
        !upsent[next_up % S] ->
          upsent[next_up % S] = 1; lossy(tospine, next_up, PARTIAL(l));
#if MUTATION == 1
          rel[next_up % S] = 1; total[next_up % S] = PARTIAL(l); deliver(b, next_up, PARTIAL(l)); next_rel++;
#endif
          next_up++
     :: next_rel < MSGS && used[next_rel % S] && ep[next_rel % S] == next_rel && got[next_rel % S] &&
        !rel[next_rel % S] ->
          rel[next_rel % S] = 1; deliver(b, next_rel, total[next_rel % S]); next_rel++
     :: else -> break
     od
     }
  od
}

/* The spine: a job of two "ranks", the uplink connections 1 (from leaf 0, on to leaf 1) and 3
   (from leaf 1, on to leaf 0). */
proctype Spine(chan in0, in1, out0, out1) {
  byte m, k, s, l;
  byte ep[S], bits[S], sum[S];
  bit used[S], rel[S];
  byte next_rel = 0;
  xr in0; xr in1; xs out0; xs out1;
end: do
  :: atomic {
     (nempty(in0) || nempty(in1));
     if :: in0?m, k -> l = 0 :: in1?m, k -> l = 1 fi;
     s = m % S;
     if
     :: !used[s] -> used[s] = 1; ep[s] = m; bits[s] = 1 << l; sum[s] = k; rel[s] = 0
     :: used[s] && m == ep[s] ->
        if
#if MUTATION == 4
        :: rel[s] && l == 0 -> lossy(out1, m, k)
        :: rel[s] && l == 1 -> lossy(out0, m, k)
#else
        :: rel[s] && l == 0 -> lossy(out1, m, sum[s])  /* from the retained total */
        :: rel[s] && l == 1 -> lossy(out0, m, sum[s])
#endif
        :: !rel[s] && (bits[s] & (1 << l)) -> skip
        :: !rel[s] && !(bits[s] & (1 << l)) -> bits[s] = bits[s] | (1 << l); sum[s] = sum[s] | k
        fi
     :: used[s] && m > ep[s] ->
        if
        :: rel[s] -> ep[s] = m; bits[s] = 1 << l; sum[s] = k; rel[s] = 0
        :: else -> assert(false)                       /* (b) */
        fi
     :: used[s] && m < ep[s] -> skip
     fi;
     do
     :: next_rel < MSGS && used[next_rel % S] && ep[next_rel % S] == next_rel && bits[next_rel % S] == 3 &&
        !rel[next_rel % S] ->
          rel[next_rel % S] = 1;
          lossy(out1, next_rel, sum[next_rel % S]); lossy(out0, next_rel, sum[next_rel % S]);
          next_rel++
     :: else -> break
     od
     }
  od
}

init {
  atomic {
    run Timer(); run Spine(lsp[0], lsp[1], spl[0], spl[1]);
    run Leaf(0, up[0], up[1], spl[0], lsp[0]); run Leaf(1, up[2], up[3], spl[1], lsp[1]);
    run Sender(0, up[0]); run Sender(1, up[1]); run Sender(2, up[2]); run Sender(3, up[3])
  }
}
