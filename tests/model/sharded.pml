/* A spin model of one job spread over K lcores, "slots sharded by index" (docs/protocol.md
   section 4, "One job on more than one lcore"), built on the slots model
   (docs/model/slots.pml): N = 2 workers in a ring (rank r writes to r + 1), one packet per message,
   window W, MSGS messages per worker, lossy FIFO links on both sides of the appliance (at most
   LMAX losses in all), go-back-N senders whose ACK timer fires when nothing else can move,
   cumulative ACKs. The appliance is K = 2 shard processes and a Tx process:
   - routing: sequence m goes to shard m mod K (one FIFO per rank and shard: a rank's packets keep
     their order within a shard, and the two shards' streams interleave freely);
   - shard i holds W slots, for its own sequences only (slot (m / K) mod W), and does the epoch
     logic of slots.pml for them: hold, add, drop a duplicate, drop a stale packet, answer a
     released one from the retained sum;
   - the window check ("ahead of the window") is against `handed`, the job's first sequence not
     yet on the TX ring (the ticket, or one more while a shard hands the ticket's slot over);
   - release order: shard i releases its complete slot m only when ticket == m, by putting the
     slot's N packets on one shared ordered output queue (the job's multi-producer TX ring), then,
     in a step of its own, ticket = m + 1; `handed` (one past the last sequence on the ring) moves
     before the packets go on the ring; answers to retransmissions go on the same queue at once,
     not gated by the ticket;
   - Tx (the lcore that drains the ring and transmits) moves the queue's packets to the receivers'
     lossy FIFO down links, so what Tx sends per receiver, in that order, is what the receiver
     can see (minus losses).
   Claims:
   (a) a receiver only ever accepts, in order, a packet carrying the full sum;
   (b) per receiver, Tx sends the releases in sequence order with no gap (the release of m only
       after those of every m' < m: the appliance never causes a PSN gap), and an answer to a
       retransmission only for a sequence already released to that receiver;
   (c) the window contract, per shard: a conforming sender's packet is never ahead of the window
       (m < ticket + W) and never finds its slot holding an older, unreleased epoch;
   (d) liveness: no non-progress cycle under weak fairness: gcc -DNP pan.c; ./pan -l -f. The
       model has no progress label: a sender's base only grows and is bounded by MSGS, so every
       cycle is a livelock, and pan -l reports any (the claim is that every fair run ends with
       every message acknowledged). Safety: gcc -DSAFETY pan.c; ./pan;
   (e) a released slot's retained sum is dropped (its slot reused by a new epoch) only once every
       receiver has accepted it; with -DROGUE: every receiver of a sender that keeps the contract.
   -DROGUE: sender 0 may, once, send one message past its window (it breaks the job contract);
   the window check rejects what it must (the appliance aborts the job; the model drops the
   packet and asserts that it came from the rogue) and (a), (b), (e) must still hold.
   Mutations (spin -DMUTATION=n), each checked by tests/model/check_sharded.sh:
     1  a shard releases its complete slot without waiting for the ticket: (b) is violated (needs
        W >= 2: with W = 1 a rank sends m + 1 only once m is acknowledged, so m + 1 can never be
        complete before m is released);
     2  the window check uses the shard's own cursor (its first unreleased sequence) instead of
        the ticket: holds under the contract, caught only with -DROGUE, by (e). The own cursor
        is never below the ticket, so the check only gets laxer, and a conforming packet reaches
        neither bound; with K = 2 the two checks differ only for W odd (m = ticket + W in the
        shard whose cursor is ticket + 1), and such a packet evicts sequence ticket - W, which a
        conforming receiver may not have yet;
     3  retransmissions of released slots not answered from the retained sum: (d), livelock;
     4  the window check against the ticket alone: a shard puts its slot c on the TX ring before it
        moves the ticket past it (two steps, as in the engine), so c may be out and acknowledged,
        and its senders' next message at the other shard, while the ticket still says c: (c)
        is violated for a conforming sender. The check counts c from when it is handed over.
   Configurations (check_sharded.sh): A = the defaults below (W 1, 4 messages, 2 losses);
   B = -DW=2 -DMSGS=5 -DLMAX=1 (two messages in flight, on the two shards). */
#ifndef MUTATION
#define MUTATION 0
#endif
#define N 2
#define K 2          /* shards */
#ifndef W
#define W 1
#endif
#ifndef MSGS
#define MSGS 4       /* messages per worker */
#endif
#define SL W         /* slots per shard: K * W = 2W in all, as in slots.pml */
#define ALL ((1 << N) - 1)
#ifndef LMAX
#define LMAX 2
#endif
#define QCAP 4       /* the shared TX ring */
byte losses = 0;
inline lossy_send(c, m) { if :: c!m :: losses < LMAX -> losses++ fi }
inline lossy_send2(c, m, k) { if :: c!m, k :: losses < LMAX -> losses++ fi }

chan up[N * K] = [1] of { byte };      /* sender r -> shard i (up[r * K + i]): msg */
chan out = [QCAP] of { byte, byte, bit, bit }; /* shards -> Tx: destination, msg, release (1) or answer (0), full sum */
chan down[N] = [2] of { byte, bit };   /* Tx -> receiver d: msg, carries the full sum */
chan ack[N] = [2] of { byte };         /* receiver d -> its sender (d - 1): next expected */

/* Slot j of shard i is entry i * SL + j of these: epoch, in use, arrival bits, released. */
byte sepoch[K * SL]; bit sused[K * SL]; byte sbits[K * SL]; bit srel[K * SL];
byte ticket = 0;               /* the job's next sequence to release (shared by the shards) */
byte handed = 0;               /* one past the last sequence put on the TX ring (ticket, or ticket + 1) */
byte nfirst[N];                /* per receiver: the next sequence Tx must send as a release */
byte rexp[N];                  /* per receiver: the next sequence it accepts */
bit rogue_sent = 0;
bit tmo[N];
byte finished = 0;

#define dest(r) (((r) + 1) % N)
#define slot(i, m) ((i) * SL + ((m) / K) % SL)
#if MUTATION == 2
#define AHEAD(m, c) ((m) >= (c) + W)       /* the shard's own cursor */
#elif MUTATION == 4
#define AHEAD(m, c) ((m) >= ticket + W)    /* the ticket alone, blind to the slot being handed over */
#else
#define AHEAD(m, c) ((m) >= handed + W)    /* the job's first sequence not handed to the TX ring */
#endif
#ifdef ROGUE
#define DELIVERED(e) (rexp[dest(1)] > (e))   /* the conforming sender's receiver has it */
#else
#define DELIVERED(e) (rexp[0] > (e) && rexp[1] > (e))
#endif
#if MUTATION == 1
#define TURN(c) true
#else
#define TURN(c) (ticket == (c))
#endif

/* Timers fire only when nothing else can move (a real ACK timeout is far longer than any transfer). */
proctype Timer() {
end: do
  :: finished == N -> break
  :: timeout && finished < N -> tmo[0] = 1; tmo[1] = 1
  od
}

/* As in slots.pml, but each step is one atomic move (a send, a timeout, an ACK): what follows
   the channel operation touches only the sender's own variables, so no other process can tell;
   it cuts the states about fivefold. Receivers and Tx are written the same way. */
proctype Sender(byte r) {
  byte base = 0, nxt = 0, a;
  do
  :: base == MSGS -> finished++; break
  :: atomic { nxt < base + W && nxt < MSGS ->
       lossy_send(up[r * K + nxt % K], nxt);   /* to the shard of nxt, or lost on the way */
       nxt++ }
  :: atomic { tmo[r] -> tmo[r] = 0; nxt = base }  /* the ACK timer fired: go back N */
#ifdef ROGUE
  :: atomic { r == 0 && !rogue_sent && nxt == base + W && nxt < MSGS ->   /* once: one past the window */
       rogue_sent = 1; lossy_send(up[r * K + nxt % K], nxt); nxt++ }
#endif
  :: atomic { ack[r]?a -> if :: a > base -> base = a; if :: nxt < base -> nxt = base :: else fi :: else fi; a = 0 }
  od
}

proctype Receiver(byte d) {
  byte m; bit sum;
  byte snd = (d + N - 1) % N;
end: do
  :: atomic {
     down[d]?m, sum ->
       if
       :: m == rexp[d] -> assert(sum); rexp[d]++   /* (a) */
       :: else -> skip                 /* duplicate (not executed again) or gap (NAK/ignore) */
       fi;
       m = 0; sum = 0;
       lossy_send(ack[snd], rexp[d])   /* cumulative ACK, may be lost */
     }
  od
}

/* The lcore that drains the job's TX ring. */
proctype Tx() {
  byte d, m; bit rel, sum;
end: do
  :: atomic {
     out?d, m, rel, sum ->
       if
       :: rel -> assert(m == nfirst[d]); nfirst[d]++   /* (b) */
       :: else -> assert(m < nfirst[d])                /* (b) */
       fi;
       lossy_send2(down[d], m, sum);
       d = 0; m = 0; rel = 0; sum = 0
     }
  od
}

proctype Shard(byte i) {
  byte r, m, s, j;
  byte c = i;                  /* own cursor: this shard's first unreleased sequence */
  bit handing = 0;             /* its slot c is on the TX ring, the ticket not yet moved past it */
end: do
  :: atomic {
     !handing && (nempty(up[0 * K + i]) || nempty(up[1 * K + i]));
     if :: up[0 * K + i]?m -> r = 0 :: up[1 * K + i]?m -> r = 1 fi;
     s = slot(i, m);
     if
     :: AHEAD(m, c) ->                 /* ahead of the window: the job is aborted */
#ifdef ROGUE
          assert(r == 0)               /* only the rogue's packets; the model drops it */
#else
          assert(false)                /* (c): a conforming sender is never ahead */
#endif
     :: else ->
     if
     :: !sused[s] -> sused[s] = 1; sepoch[s] = m; sbits[s] = (1 << r); srel[s] = 0
     :: sused[s] && m == sepoch[s] ->
          if
#if MUTATION == 3
          :: srel[s] -> skip                                /* not answered */
#else
          :: srel[s] -> out!dest(r), m, 0, (sbits[s] == ALL)  /* answer from the retained sum */
#endif
          :: !srel[s] && (sbits[s] & (1 << r)) -> skip     /* duplicate: replace / drop */
          :: !srel[s] && !(sbits[s] & (1 << r)) -> sbits[s] = sbits[s] | (1 << r)
          fi
     :: sused[s] && m > sepoch[s] ->
          if
          :: srel[s] -> assert(DELIVERED(sepoch[s]));                      /* (e) */
                        sepoch[s] = m; sbits[s] = (1 << r); srel[s] = 0   /* new epoch */
          :: else -> assert(false)       /* (c): an older epoch still unreleased */
          fi
     :: sused[s] && m < sepoch[s] -> skip                  /* stale: drop */
     fi
     fi;
     r = 0; m = 0; s = 0
     }
  :: atomic {
     /* Release the own cursor's slot once it is complete and, unless mutated, it is its turn. */
     !handing && c < MSGS && sused[slot(i, c)] && sepoch[slot(i, c)] == c && sbits[slot(i, c)] == ALL && TURN(c) ->
     s = slot(i, c);
     if :: handed < c + 1 -> handed = c + 1 :: else fi;   /* = c + 1 (c == ticket) but under mutation 1 */
     for (j : 0 .. N - 1) { out!dest(j), c, 1, (sbits[s] == ALL) }
     srel[s] = 1;
     handing = 1;
     s = 0; j = 0
     }
  :: atomic {
     /* The ticket moves past c only after its packets are on the TX ring (the engine's two
        stores): meanwhile Tx may send them, the receivers acknowledge them and the senders send
        the message a window after c, to the other shard. */
     handing ->
#if MUTATION == 1
     if :: ticket < c + 1 -> ticket = c + 1 :: else fi;
#else
     ticket = c + 1;
#endif
     c = c + K;
     handing = 0
     }
  od
}

init {
  atomic { run Shard(0); run Shard(1); run Tx(); run Timer(); run Sender(0); run Sender(1); run Receiver(0); run Receiver(1) }
}
