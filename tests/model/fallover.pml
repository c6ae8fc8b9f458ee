/* A spin model of inagg-worker --mode auto's fall-over (docs/xdp-tier.md, "Fall-over"): N ranks run K
   allreduces through the appliance; each allreduce is two phases, the data and the commit, and a
   phase's sum is released by the appliance only once every rank has sent it. The appliance may die
   at any moment; sums it released before may still arrive, or not, at each rank. A rank waiting for
   a phase may fall over at any moment (a message without the sum after the bypass, its requester
   giving up, silence: the model lets any of them happen whenever the rank waits). Falling over,
   a rank adds h = allreduces whose data it holds summed to the agreement sum on the XDP tier
   (which itself always works here) and resumes where docs/xdp-tier.md says; a rank that finished every
   allreduce on the appliance adds h = K to the same agreement, the job's closing one.
   Checked:
   - safety: every rank ends with the same tier's sum for every allreduce (never the appliance's
     at one rank and the tier's at another: the two differ, so that would corrupt the model
     replicas), a rank keeps an appliance sum only if it holds it, and the resume point is the
     rank's own allreduce or the next;
   - no deadlock: every rank finishes (spin's invalid end states).
   Mutations (spin -DMUTATION=n) show what each rule is for; each must be caught:
     1  no commit message: a rank is done with allreduce k once its data arrived summed
     2  a falling rank resumes at its own h instead of the agreed point
     3  no closing agreement: a rank that finished on the appliance just leaves (a rank that fell
        over in the last allreduce then waits for ever: an invalid end state) */
#ifndef MUTATION
#define MUTATION 0
#endif
#define N 3
#define K 2
#define APPL 1
#define TIER 2

bool alive = true;
byte released = 0;              /* phases (2k + p) the appliance has released while alive */
byte sent[N];                   /* phases each rank has sent */
byte agreed = 0;                /* ranks that have added to the agreement */
byte H = 0;                     /* the agreement sum */
byte done = 0;
byte result[N * K];             /* result[r * K + k]: the tier whose sum rank r kept for allreduce k */

inline min_sent(m) {
  m = sent[0];
  byte i;
  for (i : 1 .. N - 1) { if :: sent[i] < m -> m = sent[i] :: else fi }
}

/* The appliance releases phase `released` once every rank sent it, and may die whenever. */
proctype Appliance() {
  byte m;
end:
  do
  :: alive -> atomic { min_sent(m); if :: m > released -> released++ :: else fi }
  :: alive -> alive = false
  :: !alive -> break
  od
}

proctype Rank(byte r) {
  byte k = 0, recv = 0, h, R, j;
  bool fell = false;
  /* The appliance path: phase q = 2k (data) then 2k + 1 (commit). */
  do
  :: k == K -> break
  :: k < K ->
       sent[r] = 2 * k + 1;                      /* the data of allreduce k */
       if
       :: recv < 2 * k + 1 && released > 2 * k -> recv = 2 * k + 1   /* its sum arrives */
       :: fell = true                             /* or this rank falls over while it waits */
       fi;
       if :: fell -> break :: else fi;
#if MUTATION == 1
       result[r * K + k] = APPL; k++; recv = 2 * k; sent[r] = 2 * k; goto next;
#endif
       sent[r] = 2 * k + 2;                      /* the commit */
       if
       :: recv < 2 * k + 2 && released > 2 * k + 1 -> recv = 2 * k + 2
       :: fell = true
       fi;
       if :: fell -> break :: else fi;
       result[r * K + k] = APPL;                 /* every rank holds k: this rank is done with it */
       k++;
next:  skip
  od;
  /* The tier: the agreement (fall-over, or the closing one after K allreduces). */
#if MUTATION == 3
  if :: !fell -> goto leave :: else fi;
#endif
  h = k + (fell && recv > 2 * k -> 1 : 0);
  atomic { H = H + h; agreed++ }
  agreed == N;                                   /* everybody has added */
  if
  :: H == N * h -> R = h
  :: else -> R = H / N
  fi;
#if MUTATION == 2
  R = h;
#endif
  if
  :: !fell -> assert(R == K)                     /* closing: everybody holds everything */
  :: fell ->
       assert(R == k || R == k + 1);
       if
       :: R == k + 1 -> assert(recv > 2 * k); result[r * K + k] = APPL   /* keeps k's sum */
       :: else -> skip
       fi;
       for (j : R .. K - 1) { result[r * K + j] = TIER }               /* the tier does the rest */
  fi;
leave:
  done++;
  /* All ranks done: every allreduce has one tier's sum everywhere. */
  if
  :: done == N ->
       for (j : 0 .. N * K - 1) { assert(result[j] == result[j % K]) }
  :: else -> skip
  fi
}

init {
  atomic {
    run Appliance();
    byte r;
    for (r : 0 .. N - 1) { run Rank(r) }
  }
}
