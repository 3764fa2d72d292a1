/*
 * etcd.pml: slotd's slot protocol on etcd (lock/etcdlock/claim.go, slot.go,
 * holds.go, leases.go; lock/lease.go) as a Promela model for spin. See
 * docs/model.md ("ZooKeeper and etcd"). Run everything with model/check.
 *
 * One slot of one task on one cluster, N = 2 replicas. The cluster is one
 * linearizable store: a member failover is modelled as "an acknowledged
 * write survives" (a transaction is applied whole or not at all; its reply
 * may be lost). Keys:
 *   state     "run:<owner>:<attempt>" on its replica's running lease, or
 *             "done:..." (k_own, k_att, k_done), with the lease it is on
 *             (k_lg: its replica's lease generation) and the ticks that
 *             lease has left (k_lttl)
 *   attempts  cnt
 * A replica's running lease is kept alive by its keepalives, which every
 * renewal of any of its slots sends (leases.go): the model keeps it alive
 * while the replica runs and its keepalive stream works, whatever this
 * slot's holder does; a frozen or crashed replica, or one whose keepalives
 * are lost (kalost), lets it run out LEASE ticks after the last one, and
 * every key on it goes. A replica is one process (main loop, watchdog,
 * the holds janitor) and a Task process. Its Store keeps holds (holds.go:
 * hold, hage) in memory; a crash loses them, and its leases (a restarted
 * replica grants a new one).
 *
 * Faults (FAULTS of them): a transaction's request lost, its reply lost
 * (applied); a replica frozen or crashed; its keepalives lost for a while.
 *
 * Properties (the same as zk.pml's, docs/model.md):
 *   P1 no attempt number runs twice; P2 a replica with a valid lease is the
 *   state key's holder, on a live lease; P3 an acknowledged success is never
 *   run again; P4 a slot whose holder's lease is not valid is claimable by a
 *   live peer within 2 LEASE ticks: the janitor deletes the key a lease
 *   after the last confirmed renewal, but runs on the holder's process: one
 *   frozen just then leaves the key on its running lease for that lease's
 *   TTL (a claim in doubt its live claimant can find again is not stale);
 *   P6 a lost claim reply costs no attempt (found again); e_ends.
 *   (No P5: etcd has no orphan note; the janitor frees a failed release's
 *   key a lease after its last confirmed renewal, which is P4.)
 *
 * Mutants (-D; each must be caught):
 *   M_OLD_LOST_LEASE  Release of a lost lease does not call the store, and no
 *                     janitor: the key stays while the replica's other slots
 *                     keep its lease alive
 *   M_NO_JANITOR      only the second half
 *   M_NO_FOUND_AGAIN  a claim whose reply was lost is not found again
 *   M_FOUND_AGAIN_HELD found again without the holds check (a key its own
 *                     Store holds: a running attempt)
 *   M_CLAIM_NO_COMPARE the second transaction writes without comparing the
 *                     state key's mod revision (a held key is overwritten)
 *   M_COMPLETE_NO_COMPARE Complete writes done without comparing the value
 * LIVE_ONLY: P4 not asserted (a liveness run of a mutant).
 */

#define N      2
#define LEASE  3   /* ticks: Policy.Lease (the running lease's TTL) */
#define MARGIN 1
#define RENEW  1
#define VALID  (LEASE - MARGIN)
#ifndef CAP
#define CAP    2
#endif
#ifndef FAULTS
#define FAULTS 1
#endif

#ifdef M_OLD_LOST_LEASE
#define M_LOST_NO_RELEASE 1
#define M_NO_JANITOR 1
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

/* ---- the cluster ----------------------------------------------------- */
byte k_own;       /* state key: replica+1, 0 = none */
byte k_att;
bool k_done;      /* "done:..." (on the done bucket's lease: no expiry here) */
byte k_lg;        /* the running lease it is on: its replica's lease generation */
byte k_lttl;      /* ticks that lease has left */
byte cnt;         /* attempts key */
bool closed;

/* ---- replicas -------------------------------------------------------- */
byte ph[N];
byte att[N];
byte vt[N];
byte rt[N];
byte wt[N];
bool wdon[N];
bool lost[N];
byte tk[N];
bool cancelled[N];
bool paused[N];
bool kalost[N];   /* its keepalives are lost (the stream is down) */
byte lg[N];       /* its running lease's generation */
byte hold[N];     /* holds.go: the attempt its Store holds the slot for, 0 none */
byte hage[N];     /*   ticks since the send of its last confirmed renewal (capped) */

/* ---- ghosts ---------------------------------------------------------- */
byte started;
bool acked;
bool excuse;
byte stuck;
byte faults = FAULTS;

hidden mtype h_res;
hidden byte h_w, h_n, h_ok;

#define key_run       (k_own > 0 && !k_done)
#define live(i)       (ph[i] != P_DOWN && !paused[i])
#define can_fault     (faults > 0)
#define valid(i)      (!lost[i] && vt[i] > 0)
#define holds(i)      ((ph[i] == P_RUN && wdon[i] || ph[i] == P_COMPLETE || ph[i] == P_RELEASE) && valid(i))
#define holder        (k_own - 1)
/* the state key is i's attempt, on i's current lease */
#define key_mine(i)   (key_run && k_own == (i) + 1 && k_att == att[i] && k_lg == lg[i])
/* leases.go 175-180 live: a lease this Store keeps alive */
#define lease_live(i) (k_lg == lg[i] && k_lttl > 0)

#define view_ok(i)    (!(wdon[i] && vt[i] > 0) || key_mine(i))
#define inv_p2        (view_ok(0) && view_ok(1))

#define ended         (k_done || (cnt >= CAP && !key_run) || closed)
ltl e_ends { [] <> ended }

/* a claim in doubt its live claimant can find again (claim.go 209-217) */
#define findable      (cnt == k_att && lease_live(holder) && hold[holder] != k_att && live(holder) && !kalost[holder])
#define key_stale     (key_run && !closed && !holds(holder) && !findable)

#define START(i) \
  assert(((started >> att[i]) & 1) == 0); /* P1 */ \
  assert(!acked);                          /* P3 */ \
  started = started | (1 << att[i]); stuck = 0; \
  vt[i] = VALID; rt[i] = RENEW; wdon[i] = true; lost[i] = false; cancelled[i] = false; \
  hold[i] = att[i]; hage[i] = 0; tk[i] = T_RUN; ph[i] = P_RUN

#define FORGET(i) att[i] = 0; vt[i] = 0; rt[i] = 0; lost[i] = false; cancelled[i] = false

/* claim.go 65-121 (claim), 173-253 (claimFrom), 261-270 (foundAgain),
 * 52-63 (won: the keepalive proves the lease, holds.add). A turn whose
 * compared transaction loses a race reads again: one atomic step here.
 * Faults hit the transaction and the proving keepalive. */
inline etcd_claim(i) {
  h_w = 0; h_res = R_ERR;
  if
  :: k_done -> h_res = R_DONE                                       /* held 282-283 */
  :: key_run && closed -> h_res = R_HELD; h_w = LEASE               /* 73-85: outside, held */
  :: key_run && !closed ->
     if
#ifndef M_NO_FOUND_AGAIN
#ifndef M_FOUND_AGAIN_HELD
     :: cnt == k_att && k_own == i + 1 && lease_live(i) && hold[i] != k_att -> h_res = R_WON  /* 209-217 */
#else
     :: cnt == k_att && k_own == i + 1 && lease_live(i) -> h_res = R_WON
#endif
#endif
#ifndef M_CLAIM_NO_COMPARE
     :: else -> h_res = R_HELD; h_w = LEASE                         /* 204-218 */
#else
     :: cnt < CAP -> h_res = R_EXH /* marker: overwrite below */
     :: cnt >= CAP -> h_res = R_HELD; h_w = LEASE
#endif
     fi;
     if
     :: h_res == R_WON ->
        h_n = k_att;
        if                                                          /* 115-120 won: proven */
        :: kalost[i] || can_fault -> h_res = R_ERR; if :: !kalost[i] -> faults-- :: else fi;
           printf("r%d found again, keepalive failed\n", i)
        :: !kalost[i] -> att[i] = h_n; k_lttl = LEASE
        fi
#ifdef M_CLAIM_NO_COMPARE
     :: h_res == R_EXH -> goto put
#endif
     :: else -> skip
     fi
  :: !key_run && !k_done && closed -> h_res = R_LATE                /* 86-90 */
  :: !key_run && !k_done && !closed && cnt >= CAP -> h_res = R_EXH  /* 231-234 */
  :: !key_run && !k_done && !closed && cnt < CAP ->
put:
     /* 235-251 (146-161 for the first): attempts+1, the state key on the
      * replica's running lease, compared on the keys' mod revisions */
     assert(cnt == 0 || ((started >> cnt) & 1) || excuse);         /* P6 */
     h_n = cnt + 1;
     if
     :: can_fault -> faults--; h_res = R_ERR; printf("r%d claim request LOST\n", i)
     :: can_fault -> faults--; h_res = R_ERR; printf("r%d claim reply LOST\n", i);
        cnt = h_n; k_own = i + 1; k_att = h_n; k_done = false; k_lg = lg[i]; k_lttl = LEASE
     :: true ->
        cnt = h_n; k_own = i + 1; k_att = h_n; k_done = false; k_lg = lg[i]; k_lttl = LEASE;
        if                                                          /* 47-63 won: proven */
        :: kalost[i] -> h_res = R_ERR; printf("r%d won, keepalive failed\n", i)
        :: !kalost[i] -> h_res = R_WON; att[i] = h_n
        fi
     fi
  fi
}

/* slot.go 21-60 Renew: the hold's lease, a transaction comparing value and
 * lease (made a linearizable read by a count of the key: compares alone
 * are served from the member's own, possibly stale, state), and a
 * keepalive sent after the call; confirmed: touch the hold */
inline etcd_renew(i, ok) {
  if
  :: hold[i] == att[i] && key_mine(i) -> ok = true; k_lttl = LEASE
  :: else -> ok = false; hold[i] = 0                                /* ErrNotHeld, holds.remove */
  fi
}

/* slot.go 71-115 Complete: the value compared; done already by owner: nil */
inline etcd_complete(i, ok) {
  if
#ifndef M_COMPLETE_NO_COMPARE
  :: key_run && k_own == i + 1 && k_att == att[i] ->
#else
  :: !(k_done && k_own == i + 1 && k_att == att[i]) ->
#endif
     k_own = i + 1; k_att = att[i]; k_done = true; k_lttl = 0; hold[i] = 0; ok = true
  :: k_done && k_own == i + 1 && k_att == att[i] -> ok = true       /* 110-112 */
  :: else -> hold[i] = 0; ok = false
  fi
}

/* slot.go 124-138 Release: the value compared, then delete */
inline etcd_release(i, ok) {
  if
  :: key_run && k_own == i + 1 && k_att == att[i] -> k_own = 0; k_att = 0; k_lttl = 0; ok = true
  :: else -> ok = false
  fi;
  hold[i] = 0
}

proctype Replica(byte i) {
end:
  do
  :: atomic { live(i) && ph[i] == P_IDLE -> ph[i] = P_CLAIM }
  :: atomic { live(i) && ph[i] == P_CLAIM ->
       etcd_claim(i);
       printf("r%d claim: %e attempts %d\n", i, h_res, cnt);
       if
       :: h_res == R_WON -> START(i)
       :: h_res == R_HELD -> wt[i] = h_w; ph[i] = P_WAIT
       :: h_res == R_ERR -> wt[i] = 1; ph[i] = P_WAIT
       :: else -> ph[i] = P_SETTLED
       fi;
       h_res = R_ERR; h_w = 0; h_n = 0 }
  /* parked: its timer, or the watch (the state key's deletion) */
  :: atomic { live(i) && ph[i] == P_WAIT && (wt[i] == 0 || k_own == 0) -> wt[i] = 0; ph[i] = P_CLAIM }
  :: atomic { live(i) && ph[i] == P_RUN && wdon[i] && vt[i] == 0 ->
       printf("r%d lease lost: cancel\n", i);
       wdon[i] = false; lost[i] = true; cancelled[i] = true }
  :: atomic { live(i) && ph[i] == P_RUN && wdon[i] && vt[i] > 0 && rt[i] == 0 ->
       if
       :: kalost[i] -> rt[i] = 1; printf("r%d renew: keepalive lost\n", i)  /* unknown: retried */
       :: !kalost[i] && can_fault -> faults--; rt[i] = 1; printf("r%d renew request LOST\n", i)
       :: !kalost[i] && can_fault -> faults--; k_lttl = (k_lg == lg[i] && k_own > 0 -> LEASE : k_lttl); rt[i] = 1; printf("r%d renew reply LOST\n", i)
       :: !kalost[i] -> etcd_renew(i, h_ok);
          if
          :: h_ok -> vt[i] = VALID; rt[i] = RENEW; hage[i] = 0; stuck = 0
          :: else -> printf("r%d renew: not held\n", i); wdon[i] = false; lost[i] = true; cancelled[i] = true
          fi
       fi;
       h_ok = false }
  /* holds.go 84-115: the janitor deletes (value compared) the key of a
   * hold a whole lease past its last confirmed renewal */
#ifndef M_NO_JANITOR
  :: atomic { live(i) && hold[i] > 0 && hage[i] >= LEASE ->
       if
       :: can_fault -> faults--; printf("r%d janitor request LOST\n", i)  /* the next look tries again */
       :: true ->
          if
          :: key_run && k_own == i + 1 && k_att == hold[i] -> k_own = 0; k_att = 0; k_lttl = 0
          :: else
          fi;
          printf("r%d janitor: hold of attempt %d deleted\n", i, hold[i]);
          hold[i] = 0
       fi }
#endif
  :: atomic { live(i) && ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL) ->
       wdon[i] = false;
       if
       :: tk[i] == T_OK && !cancelled[i] && valid(i) -> ph[i] = P_COMPLETE
       :: tk[i] == T_OK && !cancelled[i] && !valid(i) ->
          printf("r%d succeeded, lease lost: not marked done\n", i); ph[i] = P_SETTLED; FORGET(i)
       :: else -> ph[i] = P_RELEASE
       fi;
       tk[i] = T_NONE }
  :: atomic { live(i) && ph[i] == P_COMPLETE ->
       hage[i] = 0;                                                  /* slot.go 73: holds.touch */
       if
       :: closed -> ph[i] = P_SETTLED
       :: can_fault -> faults--; printf("r%d complete request LOST\n", i)
       :: can_fault -> faults--; etcd_complete(i, h_ok); printf("r%d complete reply LOST\n", i)
       :: true -> etcd_complete(i, h_ok);
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
  :: atomic { live(i) && ph[i] == P_RELEASE ->
#ifdef M_LOST_NO_RELEASE
       if
       :: !valid(i) -> goto rdone
       :: else -> skip
       fi;
#endif
       if
       :: can_fault -> faults--; printf("r%d release request LOST\n", i);  /* the hold stays */
          if :: valid(i) -> goto rnext :: else fi
       :: can_fault -> faults--; etcd_release(i, h_ok); printf("r%d release reply LOST\n", i);
          if :: valid(i) -> goto rnext :: else fi
       :: true -> etcd_release(i, h_ok); printf("r%d release attempt %d: %d\n", i, att[i], h_ok)
       fi;
rdone:
       if
       :: att[i] >= CAP -> ph[i] = P_SETTLED
       :: else -> wt[i] = 0; ph[i] = P_WAIT
       fi;
       FORGET(i);
rnext:
       h_ok = false }
  od
}

proctype Task(byte i) {
end:
  do
  :: atomic { live(i) && tk[i] == T_RUN && !cancelled[i] -> tk[i] = T_OK }
  :: atomic { live(i) && tk[i] == T_RUN -> tk[i] = T_FAIL }
  od
}

/* the environment: freezes, crashes, lost keepalives */
#define FREEZE(i) \
  :: atomic { can_fault && live(i) -> faults--; paused[i] = true; printf("r%d FROZEN\n", i) } \
  :: atomic { paused[i] -> paused[i] = false; printf("r%d resumes\n", i) } \
  :: atomic { can_fault && live(i) && !kalost[i] -> faults--; kalost[i] = true; printf("r%d keepalives LOST\n", i) } \
  :: atomic { kalost[i] -> kalost[i] = false; printf("r%d keepalives back\n", i) }
#define CRASH(i) \
  :: atomic { can_fault && ph[i] != P_DOWN && ph[i] != P_IDLE -> faults--; printf("r%d CRASHED\n", i); \
       ph[i] = P_DOWN; paused[i] = false; kalost[i] = false; wdon[i] = false; tk[i] = T_NONE; wt[i] = 0; \
       FORGET(i); hold[i] = 0; hage[i] = 0; lg[i]++ } \
  :: atomic { ph[i] == P_DOWN && !closed -> ph[i] = P_CLAIM; printf("r%d restarts\n", i) }

active proctype Env() {
end:
  do
  FREEZE(0) FREEZE(1)
  CRASH(0) CRASH(1)
  od
}

#define due(i) (live(i) && (ph[i] == P_IDLE || ph[i] == P_CLAIM || \
  ph[i] == P_WAIT && (wt[i] == 0 || k_own == 0) || \
  ph[i] == P_RUN && wdon[i] && (vt[i] == 0 || rt[i] == 0) || \
  ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL || tk[i] == T_RUN && cancelled[i]) || \
  ph[i] == P_COMPLETE || ph[i] == P_RELEASE || JANITOR_DUE(i)))
#ifndef M_NO_JANITOR
#define JANITOR_DUE(i) (hold[i] > 0 && hage[i] >= LEASE)
#else
#define JANITOR_DUE(i) false
#endif

active proctype Clock() {
  byte i;
end:
  do
  :: atomic { !due(0) && !due(1) ->
       i = 0;
       do
       :: i < N ->
          if :: vt[i] > 0 -> vt[i]-- :: else fi;
          if :: rt[i] > 0 -> rt[i]-- :: else fi;
          if :: wt[i] > 0 -> wt[i]-- :: else fi;
          if :: hold[i] > 0 && hage[i] < LEASE -> hage[i]++ :: else fi;
          i++
       :: else -> break
       od;
       i = 0;
       printf("tick\n");
       /* P4 */
       if
       :: key_stale && cnt < CAP -> stuck++;
#ifndef LIVE_ONLY
          assert(stuck <= 2 * LEASE)
#else
          if :: stuck > 2 * LEASE -> stuck = 2 * LEASE :: else fi
#endif
       :: else -> stuck = 0
       fi;
       /* the state key's running lease: kept alive by its live replica's
        * keepalives, else it runs out LEASE ticks after the last one */
       if
       :: key_run ->
          if
          :: live(holder) && !kalost[holder] && k_lg == lg[holder] -> k_lttl = LEASE
          :: else ->
             if :: k_lttl > 0 -> k_lttl-- :: else fi;
             if
             :: k_lttl == 0 ->
                printf("lease of r%d expired\n", holder);
                /* a claim in doubt whose lease ran out: P6 excuses it */
                excuse = true;
                if :: k_lg == lg[holder] -> lg[holder]++; hold[holder] = 0 :: else fi;
                k_own = 0; k_att = 0
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
