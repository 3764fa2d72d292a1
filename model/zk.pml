/*
 * zk.pml: slotd's slot protocol on ZooKeeper (lock/zklock/claim.go, ops.go,
 * value.go; lock/lease.go) as a Promela model for spin. See docs/model.md
 * ("ZooKeeper and etcd"). Run everything with model/check.
 *
 * One slot of one task on one ensemble, N = 2 replicas. The ensemble is one
 * linearizable store: a member failover is modelled as "an acknowledged
 * write survives" (a write is applied whole or not at all; its reply may be
 * lost), which is what a quorum commit gives. Nodes:
 *   slot node  "<attempts>\n<base>\n<ttl>\n<done>": sn_att, sn_done, done_att,
 *              and its version sn_ver (every multi-op checks it)
 *   run node   ephemeral, "run:<owner>:<attempt>\n<lease ms>": run_own,
 *              run_att, its session run_ses, the lease left by its mtime
 *              (run_left, value.go Store.leaseLeft), and the ticks its session
 *              has left without a ping (run_sest)
 * A replica is one process: its main loop (scheduler run states, lock.Lease
 * Complete/Release/finish), its lease watchdog, its task. Its Store keeps
 * the in-doubt record (claim.go doubt: dbt, dver) and the orphaned release
 * (ops.go orphans: orph) in memory: a crash loses both.
 *
 * Time is discrete (count-downs, as in slot.pml): a running replica's steps
 * take no time unless it is paused. Sessions: a session is pinged by its
 * live client every tick; one silent for SESSION ticks (its replica frozen
 * or crashed) expires, and its run node goes with it. A frozen replica
 * whose session expired gets a new one when it resumes (gen[i]).
 *
 * Faults (FAULTS of them): a request lost, a reply lost (the write applied);
 * a replica frozen (any number of ticks, its task too) or crashed (it
 * restarts with a new session; the old one lingers until it expires).
 *
 * Properties (docs/model.md):
 *   P1 no attempt number runs twice                    (assert at task start)
 *   P2 at most one attempt runs at a time while leases hold:
 *      a replica whose watchdog holds a valid lease is the run node's
 *      holder, on its session, unexpired                (Monitor: inv_p2)
 *   P3 an acknowledged success is never run again      (assert at task start)
 *   P4 a slot whose holder's lease is not valid is claimable by a live peer
 *      within LEASE ticks of the node's last write or valid hold (bounded
 *      liveness: a ghost count of ticks, asserted at each tick)
 *   P5 a live holder that gave its slot back (Lease.Release) leaves no run
 *      node behind across a tick, unless its last release or claim call
 *      failed (then its next claim frees it: freeOrphan)
 *   P6 a lost claim reply costs no attempt: an attempt is counted only
 *      after the one before it started, unless that one's claimant froze or
 *      crashed while in doubt, or left it in doubt for a whole lease
 *      (assert at the claim)
 *   e_ends (LTL, weak fairness) every slot ends: done, exhausted or closed
 *
 * Mutants (-D; each must be caught):
 *   M_OLD_LOST_LEASE  the code before the fix: Release of a lost lease does
 *                     not call the store, and a run node is held for as long
 *                     as its session lives (no lease recorded)
 *   M_LOST_NO_RELEASE only the first half; M_NO_RUN_EXPIRY only the second
 *   M_NO_DOUBT        a claim whose reply was lost is not recorded in doubt
 *   M_TAKEOVER_DROPS_DOUBT the record goes before the take-over is answered
 *                     (the code before the fix this model found)
 *   M_DOUBT_ANY       a claim in doubt takes over any run node
 *   M_NO_ORPHAN       a failed release is not noted; no freeOrphan
 *   M_CLAIM_NO_COMPARE a claim creates its run node over a held one
 *   M_COMPLETE_ANY_DONE Complete's "completed already" answers for any slot
 *                     node without a run node
 *   M_LEASE_OVER_SESSION a session timeout shorter than the lease (what
 *                     Claim's ErrLeaseOverSession refuses)
 * LIVE_ONLY: P4 and P5 not asserted (a liveness run of a mutant).
 */

#define N      2
#define LEASE  3   /* ticks: Policy.Lease */
#define MARGIN 1   /* leaseMargin: lease/10, >= 1 tick */
#define RENEW  1   /* the watchdog renews every lease/3 */
#define VALID  (LEASE - MARGIN)
#ifndef M_LEASE_OVER_SESSION
#define SESSION 4  /* session timeout >= lease (claim.go 78-80) */
#else
#define SESSION 1
#endif
#ifndef CAP
#define CAP    2   /* max_attempts */
#endif
#ifndef FAULTS
#define FAULTS 1
#endif

#ifdef M_OLD_LOST_LEASE
#define M_LOST_NO_RELEASE 1
#define M_NO_RUN_EXPIRY 1
#endif

mtype = { R_WON, R_HELD, R_DONE, R_EXH, R_LATE, R_ERR };

#define P_IDLE     0
#define P_CLAIM    1
#define P_WAIT     2
#define P_RUN      3
#define P_COMPLETE 4
#define P_RELEASE  5
#define P_SETTLED  6
#define P_DOWN     7

#define T_NONE 0
#define T_RUN  1
#define T_OK   2
#define T_FAIL 3

/* ---- the ensemble ---------------------------------------------------- */
byte sn_att;      /* attempts in the slot node (0: no slot node yet) */
bool sn_done;     /* its done marker */
byte done_att;    /* the attempt the done marker names */
byte sn_ver;      /* the slot node's version */
byte run_own;     /* run node: replica+1, 0 = none */
byte run_att;
byte run_ses;     /* its ephemeral owner: the session generation of run_own */
byte run_left;    /* lease left by its mtime (0: ran out, leaseLeft <= 0) */
byte run_sest;    /* ticks its session may stay silent before it expires */
bool closed;      /* past the slot's deadline */

/* ---- replicas -------------------------------------------------------- */
byte ph[N];
byte att[N];
byte vt[N];       /* ticks to validUntil */
byte rt[N];       /* ticks to the next renewal */
byte wt[N];       /* park timer */
bool wdon[N];
bool lost[N];
byte tk[N];
bool cancelled[N];
bool paused[N];
byte gen[N];      /* the replica's current session */
byte dbt[N];      /* claim.go doubt: the attempt of the run value in doubt, 0 none */
byte dver[N];     /*   and the slot node version its multi-op checked */
byte orph[N];     /* ops.go orphans: the attempt of a failed release, 0 none */
byte gone[N];     /* ghost: the attempt replica i last gave back (Lease.Release) */
bool lastfail[N]; /* ghost: replica i's last release or claim call failed */

/* ---- ghosts ---------------------------------------------------------- */
byte started;     /* bit a: attempt a started a task (P1) */
bool acked;       /* a Complete returned nil to its holder (P3) */
bool excuse;      /* a replica with a claim in doubt froze or crashed (P6) */
byte stuck;       /* ticks the run node held the slot with no valid lease (P4) */
byte faults = FAULTS;

hidden mtype h_res;
hidden byte h_w, h_n, h_v;
hidden byte h_take, h_exp;

#define run_on        (run_own > 0)
#define run_held      (run_on && run_left > 0)
#define live(i)       (ph[i] != P_DOWN && !paused[i])
#define can_fault     (faults > 0)
#define valid(i)      (!lost[i] && vt[i] > 0)
/* replica i holds a valid lease: its watchdog runs (or its finish keeps it) */
#define holds(i)      ((ph[i] == P_RUN && wdon[i] || ph[i] == P_COMPLETE || ph[i] == P_RELEASE) && valid(i))
/* the run node is i's attempt on i's current session */
#define node_mine(i)  (run_on && run_own == (i) + 1 && run_att == att[i] && run_ses == gen[i])

/* P2: a replica with a valid lease is the holder of an unexpired run node */
#define view_ok(i)    (!(wdon[i] && vt[i] > 0) || node_mine(i) && run_left > 0)
#define inv_p2        (view_ok(0) && view_ok(1))

/* ended: done, exhausted (no attempt left and none running), or closed */
#define ended         (sn_done || (sn_att >= CAP && !run_held) || closed)
ltl e_ends { [] <> ended }

#define holder        (run_own - 1)
/* the node holds the slot though nobody holds its lease, and it is not a
 * claim in doubt its replica will take up (P4, P5) */
#define node_stale    (run_held && !sn_done && !closed && !holds(holder))

#define START(i) \
  assert(((started >> att[i]) & 1) == 0); /* P1 */ \
  assert(!acked);                          /* P3 */ \
  started = started | (1 << att[i]); stuck = 0; \
  vt[i] = VALID; rt[i] = RENEW; wdon[i] = true; lost[i] = false; cancelled[i] = false; \
  gone[i] = 0; tk[i] = T_RUN; ph[i] = P_RUN

#define FORGET(i) att[i] = 0; vt[i] = 0; rt[i] = 0; lost[i] = false; cancelled[i] = false

/* ops.go 170-183 freeOrphan: delete the run node if it still holds the
 * value of the failed release, on this session; the note goes then */
inline free_orphan(i) {
  if
  :: run_on && run_own == i + 1 && run_att == orph[i] && run_ses == gen[i] ->
     run_own = 0; run_att = 0; run_left = 0
  :: else -> skip
  fi;
  orph[i] = 0
}

/* claim.go 77-253 (Claim, claim, write), 283-358 (decide), 255-281 (landed: the leader's
 * stamp is in the window by the model's clock). Each turn of the race loop
 * reads and writes under a version check: one atomic step here (a lost race
 * reads again). Faults hit the multi-op (and freeOrphan's delete). */
inline zk_claim(i) {
  h_take = false; h_exp = false; h_w = 0; h_res = R_ERR; lastfail[i] = false;
  /* 94-98: the orphan of a failed release goes first */
  if
  :: orph[i] > 0 && can_fault -> faults--; h_res = R_ERR; lastfail[i] = true; printf("r%d freeOrphan LOST\n", i); goto cdone
  :: orph[i] > 0 -> free_orphan(i)
  :: else -> skip
  fi;
  /* 116-120: the slot node moved past the version the claim in doubt checked */
  if
  :: dbt[i] > 0 && !run_on && sn_ver > dver[i] -> dbt[i] = 0
  :: else -> skip
  fi;
  /* decide 292-339 (the second reading of 303-313 changes nothing here: see docs/model.md, Not modelled) */
  if
#ifndef M_DOUBT_ANY
  :: run_on && dbt[i] > 0 && run_own == i + 1 && run_att == dbt[i] && run_ses == gen[i] -> h_take = true /* 301-305 */
#else
  :: run_on && dbt[i] > 0 -> h_take = true
#endif
#ifndef M_CLAIM_NO_COMPARE
  :: run_on && !(dbt[i] > 0 && run_own == i + 1 && run_att == dbt[i] && run_ses == gen[i]) && run_left == 0 -> h_exp = true /* 319-328 */
  :: run_held && !(dbt[i] > 0 && run_own == i + 1 && run_att == dbt[i] && run_ses == gen[i]) -> h_res = R_HELD; h_w = run_left; goto cdone /* 329-337 */
#else
  :: run_on && !(dbt[i] > 0 && run_own == i + 1 && run_att == dbt[i] && run_ses == gen[i]) -> h_exp = true
#endif
  :: !run_on -> skip
  fi;
  if
  :: h_take ->
     /* 128-151: rewritten (its lease counts from now), won with its
      * attempt. The record goes once the take-over is answered (its outcome
      * unknown, the next claim takes it up again). */
     h_n = run_att;
#ifdef M_TAKEOVER_DROPS_DOUBT
     dbt[i] = 0;    /* the code before the fix: the record went first */
#endif
     if
     :: can_fault -> faults--; h_res = R_ERR; printf("r%d take-over request LOST\n", i)
     :: can_fault -> faults--; run_left = LEASE; run_sest = SESSION; stuck = 0; h_res = R_ERR; printf("r%d take-over reply LOST\n", i)
     :: true -> run_left = LEASE; run_sest = SESSION; h_res = R_WON; att[i] = h_n; dbt[i] = 0
     fi;
     goto cdone
  :: else -> skip
  fi;
  if
  :: sn_done -> h_res = R_DONE                                     /* 344-348 */
  :: !sn_done && closed -> h_res = R_LATE                          /* 361-364 */
  :: !sn_done && !closed && sn_att >= CAP -> h_res = R_EXH         /* 352-354 */
  :: !sn_done && !closed && sn_att < CAP ->
     /* 207-253 (write): delete the expired node (if any), count, create the run node */
     assert(sn_att == 0 || ((started >> sn_att) & 1) || excuse);  /* P6 */
     h_n = sn_att + 1; h_v = sn_ver;
     if
     :: can_fault -> faults--; h_res = R_ERR; printf("r%d claim request LOST\n", i)
     :: can_fault -> faults--; h_res = R_ERR; printf("r%d claim reply LOST\n", i);
        sn_att = h_n; sn_ver++; run_own = i + 1; run_att = h_n; run_ses = gen[i]; run_left = LEASE; run_sest = SESSION
     :: true -> h_res = R_WON; att[i] = h_n; dbt[i] = 0;           /* 235 */
        sn_att = h_n; sn_ver++; run_own = i + 1; run_att = h_n; run_ses = gen[i]; run_left = LEASE; run_sest = SESSION
     fi;
#ifndef M_NO_DOUBT
     if
     :: h_res == R_ERR -> dbt[i] = h_n; dver[i] = h_v /* 232 */
     :: else -> skip
     fi
#endif
  fi;
cdone:
  skip
}

/* ops.go 38-65 Renew (from a hold, holds.go renewHeld, the same checks by
 * the versions the claim left): held() (the run node holds owner's value, on this
 * session), then a version-checked set of the run node: its mtime, so its
 * lease, counts from now. */
inline zk_renew(i, ok) {
  if
  :: node_mine(i) -> run_left = LEASE; run_sest = SESSION; stuck = 0; ok = true /* the session was heard from */
  :: else -> ok = false                                            /* ErrNotHeld */
  fi
}

/* ops.go 70-112 Complete: held() → delete the run node + done marker in one
 * multi-op; not held, no run node, and the done marker is owner's: nil
 * (completed already: a retry after a lost reply). */
inline zk_complete(i, ok) {
  if
  :: node_mine(i) ->
     assert(!sn_done);
     run_own = 0; run_att = 0; run_left = 0;
     sn_done = true; done_att = att[i]; sn_ver++; ok = true
#ifndef M_COMPLETE_ANY_DONE
  :: !node_mine(i) && !run_on && sn_done && done_att == att[i] -> ok = true
#else
  :: !node_mine(i) && !run_on -> ok = true
#endif
  :: else -> ok = false
  fi
}

/* ops.go 122-151 Release: held() → delete the run node under version checks */
inline zk_release(i, ok) {
  if
  :: node_mine(i) -> run_own = 0; run_att = 0; run_left = 0; ok = true
  :: else -> ok = false                                            /* ErrNotHeld */
  fi
}

hidden byte h_ok;

proctype Replica(byte i) {
end:
  do
  :: atomic { live(i) && ph[i] == P_IDLE -> ph[i] = P_CLAIM }
  :: atomic { live(i) && ph[i] == P_CLAIM ->
       zk_claim(i);
       printf("r%d claim: %e attempts %d\n", i, h_res, sn_att);
       if
       :: h_res == R_WON -> START(i)
       :: h_res == R_HELD -> wt[i] = h_w; ph[i] = P_WAIT
       :: h_res == R_ERR -> wt[i] = 1; ph[i] = P_WAIT
       :: else -> ph[i] = P_SETTLED
       fi;
       h_res = R_ERR; h_w = 0; h_n = 0; h_v = 0; h_take = false; h_exp = false }
  /* parked: its timer, or the watch on the run node (its deletion) */
  :: atomic { live(i) && ph[i] == P_WAIT && (wt[i] == 0 || !run_on) -> wt[i] = 0; ph[i] = P_CLAIM }
  /* the watchdog (keepalive.go): no renewal confirmed before validUntil */
  :: atomic { live(i) && ph[i] == P_RUN && wdon[i] && vt[i] == 0 ->
       printf("r%d lease lost: cancel\n", i);
       wdon[i] = false; lost[i] = true; cancelled[i] = true }
  /* the watchdog renews (lease.go 68-79 → Store.Renew) */
  :: atomic { live(i) && ph[i] == P_RUN && wdon[i] && vt[i] > 0 && rt[i] == 0 ->
       if
       :: can_fault -> faults--; rt[i] = 1; printf("r%d renew request LOST\n", i)
       :: can_fault -> faults--; zk_renew(i, h_ok); rt[i] = 1; printf("r%d renew reply LOST\n", i)
       :: true -> zk_renew(i, h_ok);
          if
          :: h_ok -> vt[i] = VALID; rt[i] = RENEW
          :: else -> printf("r%d renew: not held\n", i); wdon[i] = false; lost[i] = true; cancelled[i] = true
          fi
       fi;
       h_ok = false }
  /* the task returned: Complete (success) or Release (failure, cancelled) */
  :: atomic { live(i) && ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL) ->
       wdon[i] = false;
       if
       :: tk[i] == T_OK && !cancelled[i] && valid(i) -> ph[i] = P_COMPLETE
       :: tk[i] == T_OK && !cancelled[i] && !valid(i) ->
          /* lease.go 174-181: lost before Complete: no try, not marked done */
          printf("r%d succeeded, lease lost: not marked done\n", i); ph[i] = P_SETTLED; FORGET(i)
       :: else -> ph[i] = P_RELEASE
       fi;
       tk[i] = T_NONE }
  /* lease.go 182-189, 213-253 finish(persist): retried until answered or
   * the deadline (ctx) */
  :: atomic { live(i) && ph[i] == P_COMPLETE ->
       if
       :: closed -> ph[i] = P_SETTLED
       :: can_fault -> faults--; printf("r%d complete request LOST\n", i)
       :: can_fault -> faults--; zk_complete(i, h_ok); printf("r%d complete reply LOST\n", i)
       :: true -> zk_complete(i, h_ok);
          if
          :: h_ok -> acked = true;
             assert((started >> (att[i] + 1)) == 0)                   /* P3 */
          :: else
          fi;
          printf("r%d complete attempt %d: %d\n", i, att[i], h_ok);
          ph[i] = P_SETTLED
       fi;
       if :: ph[i] == P_SETTLED -> FORGET(i) :: else fi;
       h_ok = false }
  /* lease.go 198, 279-287, 213-253 finish(!persist): retried while the
   * lease is valid; a lost lease is released too, in one try */
  :: atomic { live(i) && ph[i] == P_RELEASE ->
       gone[i] = att[i];
#ifdef M_LOST_NO_RELEASE
       if
       :: !valid(i) -> goto rdone    /* the old finish: ErrLeaseLost, no store call */
       :: else -> skip
       fi;
#endif
       if
       :: can_fault -> faults--; printf("r%d release request LOST\n", i); h_ok = false; lastfail[i] = true;
#ifndef M_NO_ORPHAN
          orph[i] = att[i];                                          /* ops.go 132, 146, 162 */
#endif
          if :: valid(i) -> goto rnext :: else fi                   /* retried while valid */
       :: can_fault -> faults--; zk_release(i, h_ok); printf("r%d release reply LOST\n", i); lastfail[i] = true;
#ifndef M_NO_ORPHAN
          orph[i] = att[i];
#endif
          if :: valid(i) -> goto rnext :: else fi
       :: true -> zk_release(i, h_ok); lastfail[i] = false; printf("r%d release attempt %d: %d\n", i, att[i], h_ok)
       fi;
rdone:
       /* handle(): its last allowed attempt settles; else a peer goes first,
        * then it claims again */
       if
       :: att[i] >= CAP -> ph[i] = P_SETTLED
       :: else -> wt[i] = 0; ph[i] = P_WAIT
       fi;
       FORGET(i);
rnext:
       h_ok = false }
  od
}

/* replica i's task: it returns ok or an error; a cancelled one stops
 * (a process of its own, so that weak fairness makes it end) */
proctype Task(byte i) {
end:
  do
  :: atomic { live(i) && tk[i] == T_RUN && !cancelled[i] -> tk[i] = T_OK }
  :: atomic { live(i) && tk[i] == T_RUN -> tk[i] = T_FAIL }
  od
}

/* the environment: freezes, crashes. A crashed replica restarts as a new
 * process: a new session (the old one lingers until it expires), no claim
 * in doubt, no orphan, no lease. */
#define FREEZE(i) \
  :: atomic { can_fault && live(i) -> faults--; paused[i] = true; excuse = excuse || dbt[i] > 0; printf("r%d FROZEN\n", i) } \
  :: atomic { paused[i] -> paused[i] = false; printf("r%d resumes\n", i) }
#define CRASH(i) \
  :: atomic { can_fault && ph[i] != P_DOWN && ph[i] != P_IDLE -> faults--; printf("r%d CRASHED\n", i); \
       excuse = excuse || dbt[i] > 0; \
       ph[i] = P_DOWN; paused[i] = false; wdon[i] = false; tk[i] = T_NONE; wt[i] = 0; \
       FORGET(i); dbt[i] = 0; dver[i] = 0; orph[i] = 0; gone[i] = 0; lastfail[i] = false; gen[i]++ } \
  :: atomic { ph[i] == P_DOWN && !closed -> ph[i] = P_CLAIM; printf("r%d restarts\n", i) }

active proctype Env() {
end:
  do
  FREEZE(0) FREEZE(1)
  CRASH(0) CRASH(1)
  od
}

/* a step is due: the clock waits for it */
#define due(i) (live(i) && (ph[i] == P_IDLE || ph[i] == P_CLAIM || \
  ph[i] == P_WAIT && (wt[i] == 0 || !run_on) || \
  ph[i] == P_RUN && wdon[i] && (vt[i] == 0 || rt[i] == 0) || \
  ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL || tk[i] == T_RUN && cancelled[i]) || \
  ph[i] == P_COMPLETE || ph[i] == P_RELEASE))

active proctype Clock() {
  byte i;
end:
  do
  :: atomic { !due(0) && !due(1) ->
       /* P5: a live holder that gave the slot back left no node behind */
#ifndef LIVE_ONLY
       assert(!(node_stale && live(holder) && run_ses == gen[holder] && gone[holder] == run_att &&
                !lastfail[holder] && sn_att < CAP));
#endif
       i = 0;
       do
       :: i < N ->
          if :: vt[i] > 0 -> vt[i]-- :: else fi;
          if :: rt[i] > 0 -> rt[i]-- :: else fi;
          if :: wt[i] > 0 -> wt[i]-- :: else fi;
          i++
       :: else -> break
       od;
       i = 0;
       printf("tick\n");
       /* P4: ticks the run node holds the slot with nobody's valid lease */
       if
       :: node_stale && sn_att < CAP -> stuck++;
#ifndef LIVE_ONLY
          assert(stuck <= LEASE)
#else
          if :: stuck > LEASE -> stuck = LEASE :: else fi  /* (a liveness run: P4 not checked) */
#endif
       :: else -> stuck = 0
       fi;
       if
       :: run_on ->
#ifndef M_NO_RUN_EXPIRY
          if :: run_left > 0 -> run_left-- :: else fi;             /* value.go 127-139 */
          /* a claim in doubt not taken up within its lease is a peer's to
           * take over (claim.go 306-314): P6 excuses the attempt */
          if :: run_left == 0 && dbt[holder] == run_att -> excuse = true :: else fi;
#endif
          /* the run node's session: pinged by its live client, else it
           * expires SESSION ticks after the last ping, with its node */
          if
          :: live(holder) && run_ses == gen[holder] -> run_sest = SESSION
          :: else ->
             run_sest--;
             if
             :: run_sest == 0 ->
                printf("session of r%d expired\n", holder);
                if :: paused[holder] && run_ses == gen[holder] -> gen[holder]++ :: else fi;
                run_own = 0; run_att = 0; run_left = 0
             :: else
             fi
          fi
       :: else
       fi;
       if :: !closed -> if :: closed = true; printf("deadline\n") :: skip fi :: else fi }
  od
}

active proctype Monitor() {
  atomic { !inv_p2 -> assert(inv_p2) }
}

init {
  atomic {
    run Replica(0); run Replica(1); run Task(0); run Task(1)
  }
}
