/*
 * controls.pml: slotd's operator controls as a Promela model for spin. See
 * docs/model.md ("Operator controls"). Run everything with model/check.
 *
 * Three parts, one per run (-DPART_TRIGGER, -DPART_PAUSE; the default is
 * the running record), each of one task on one linearizable store, in the
 * discrete time of the other models (lease 3 ticks, margin 1, the
 * watchdog renewing every tick). Each store operation is one atomic step
 * whose comment names the code: the Redis script and kv.Controls'
 * function (lock/internal/kv/controls.go, what etcd, ZooKeeper, the
 * embedded store and Redlock run), which implement one semantics. kv's
 * compare-and-set loop (update, controls.go 62-89) lands each write as one
 * read-modify-write on the entry's version, as the script does: one atomic
 * step, whose mutants M_*_NO_COMPARE split into a read and a blind write.
 *
 * RUNNING (default): concurrency = "forbid" (-DREPLACE: "replace"), two
 * slots of the task (slot 0 fires first, slot 1 at any later tick), two
 * replicas, each running at most one attempt at a time. The slot's own
 * protocol (slot.pml, zk.pml, etcd.pml) is reduced to a key with a TTL
 * and an attempt counter (a claim of a free key wins); the running record
 * running/<task> = "<slot> run:<owner>:<attempt>" with a TTL:
 *   Occupy         occupy.lua 19-32; kv controls.go 395-417
 *   RenewOccupancy renew.lua on the running key (redis_controls.go 281-284);
 *                  kv controls.go 420-432
 *   Vacate         release.lua on the running key (288-295); kv 435-447
 * and the engine (scheduler/attempt.go, concurrency.go):
 *   attempt.run 83-120: hold (the watchdog), occupy, execute, finish
 *   occupy 55-95: Occupy; busy: skipForbidden (attempt.go 302-327, the
 *     slot marked done); replaced another slot: awaitStopped (237-254: the
 *     replaced slot's state polled until not running, for at most a lease
 *     and a poll); then the record is renewed by the watchdog (a.rec)
 *   renewRecord 188-213: after each confirmed renewal of the slot; not
 *     held: forbid takes it again (busy: "both run", the task goes on),
 *     replace cancels the task (ErrSuperseded)
 *   execute 161-167: vacate after the task; an Occupy error: not started
 *   finish 177-187: superseded or succeeded: Complete; else Release
 * Faults (FAULTS): a store request lost, its reply lost (applied), an
 * Occupy resent after its first send landed (go-redis retries a script on
 * a network error: the second answers for both), a replica crashed (its
 * task dies with it, SPEC §8; it restarts knowing nothing).
 * Assumed, as slot.pml's A_STOP and A_NOSTALL: a cancelled task stops at
 * once (within the margin), and no replica is paused while a task runs.
 *
 * Properties:
 *   R1 (forbid) a slot's task starts only while no other slot's task runs,
 *      unless that one's record expired under it (its record renewals all
 *      failed for a lease: the engine logs "both run"; -DPROP_R1_STRICT
 *      drops the exception: a documented counterexample)
 *   R2 (replace) a slot's task starts only once every other slot's task
 *      has stopped: a replaced attempt stops before the next one's effects
 *   R3 (replace) a task is cancelled as superseded only when another
 *      slot's attempt holds the record (not by its own record's expiry)
 *   e_ends every slot that fired ends (done, skipped or exhausted), under
 *      weak fairness
 * Mutants: M_OCCUPY_NO_COMPARE (forbid's Occupy reads, then writes
 *   blind: kv's update without the version compare), M_NO_AWAIT (replace
 *   starts at once), M_RENEW_NO_COMPARE (RenewOccupancy extends any
 *   record: a replaced attempt never learns it), M_NO_RECORD_TTL (the
 *   record lives until vacated: a crashed holder blocks forbid forever).
 *
 * TRIGGER and PAUSE: see their sections below.
 */

#ifndef FAULTS
#define FAULTS 1
#endif
#define N      2
#define LEASE  3
#define VALID  2   /* LEASE - margin: validUntil after a confirmed renewal */

#ifndef PART_TRIGGER
#ifndef PART_PAUSE
#define PART_RUNNING 1
#endif
#endif

byte faults = FAULTS;
#define can_fault (faults > 0)

#ifdef PART_RUNNING
#define S      2
#define CAP    2   /* max_attempts */
#define AWAIT  (LEASE + 1)  /* awaitStopped: a lease and a poll */

#define P_IDLE  0
#define P_OCC   1  /* won: occupy */
#define P_AWAIT 2  /* replace: awaiting the replaced slot's stop */
#define P_RUN   3  /* the task runs (or has ended: tk) */
#define P_FIN   4  /* finish: complete (fin_ok) or release */
#define P_DOWN  5

#define T_NONE 0
#define T_RUN  1
#define T_END  2

mtype = { O_TAKEN, O_BUSY, O_ERR };

/* ---- the store ------------------------------------------------------- */
byte sOwn[S];   /* slot key: replica+1 holding it, 0 none */
byte sAtt[S];
byte sTTL[S];
bool sDone[S];
byte sCnt[S];   /* attempts */
bool fired[S];
byte rSlot;     /* running record: slot+1, 0 none */
byte rOwn;      /*   replica+1 */
byte rAtt;
byte rTTL;

/* ---- replicas -------------------------------------------------------- */
byte ph[N];
byte cs[N];      /* the slot it holds */
byte att[N];
byte vt[N];      /* ticks to validUntil */
bool rt[N];      /* renewed this tick */
bool wdon[N];    /* the watchdog runs */
bool rec[N];     /* a.rec: the watchdog renews the record */
byte os[N];      /* replace: the slot+1 it awaits */
byte aw[N];      /* ticks left of awaitStopped */
byte tk[N];
bool cancelled[N];
bool sup[N];     /* cancelled as superseded */
bool fin_ok[N];  /* finish: complete, else release */
byte settled[N]; /* bit s: finished with slot s */

/* ---- ghosts ---------------------------------------------------------- */
bool expired[N]; /* its record expired while its watchdog renewed it (lost renewals) */
byte stale;      /* ticks the record has had no live holder renewing it */
bool repl[N];    /* its record was taken by another slot's Occupy */
hidden mtype o_res;
hidden byte o_other, h_s, h_j;

#define key_mine(i)  (sOwn[cs[i]] == (i) + 1 && sAtt[cs[i]] == att[i] && !sDone[cs[i]])
#define rec_mine(i)  (rSlot == cs[i] + 1 && rOwn == (i) + 1 && rAtt == att[i])
#define running(s)   (sOwn[s] > 0 && !sDone[s])
#define task_runs(j) (ph[j] == P_RUN && tk[j] == T_RUN)
#define claimable(i, s) (fired[s] && ((settled[i] >> (s)) & 1) == 0 && (sDone[s] || !running(s)))
#define slot_ended(s) (!fired[s] || sDone[s] || sCnt[s] >= CAP && !running(s))
#define ended        (slot_ended(0) && slot_ended(1))
ltl e_ends { [] <> ended }

#define SET_REC(i) rSlot = cs[i] + 1; rOwn = (i) + 1; rAtt = att[i]; rTTL = LEASE; stale = 0

/* occupy.lua 19-32, kv controls.go 398-409: another slot's record: forbid
 * answers busy, replace takes its place; none, or this slot's: taken */
inline occupy(i) {
  o_other = 0;
  if
  :: rSlot != 0 && rSlot != cs[i] + 1 ->
#ifndef REPLACE
     o_res = O_BUSY
#else
     o_other = rSlot;
     if :: rOwn > 0 && rec_mine(rOwn - 1) -> repl[rOwn - 1] = true :: else fi;
     SET_REC(i); o_res = O_TAKEN
#endif
  :: else -> SET_REC(i); o_res = O_TAKEN
  fi
}

/* R1, R2: at a task's start, no other slot's task runs (R1: unless its
 * record expired under it) */
#ifdef REPLACE
#define OK_BESIDE(j) false
#else
#ifdef PROP_R1_STRICT
#define OK_BESIDE(j) false
#else
#define OK_BESIDE(j) expired[j]
#endif
#endif
#define START(i) \
  h_j = 1 - (i); \
  assert(!(task_runs(h_j) && cs[h_j] != cs[i]) || OK_BESIDE(h_j)); /* R1, R2 */ \
  h_j = 0; tk[i] = T_RUN; rec[i] = true; ph[i] = P_RUN; \
  printf("r%d starts slot %d attempt %d\n", i, cs[i], att[i])

#define CANCEL(i) cancelled[i] = true; if :: tk[i] == T_RUN -> tk[i] = T_END :: else fi

#define FORGET(i) ph[i] = P_IDLE; att[i] = 0; vt[i] = 0; rt[i] = false; wdon[i] = false; \
  rec[i] = false; os[i] = 0; aw[i] = 0; tk[i] = T_NONE; cancelled[i] = false; sup[i] = false; \
  fin_ok[i] = false; expired[i] = false; repl[i] = false; cs[i] = 0

proctype Replica(byte i) {
end:
  do
  /* the claim, reduced: a free key is won (claim.lua; the slot models) */
  :: atomic { ph[i] == P_IDLE && (claimable(i, 0) || claimable(i, 1)) ->
       if :: claimable(i, 0) -> h_s = 0 :: claimable(i, 1) -> h_s = 1 fi;
       if
       :: sDone[h_s] || sCnt[h_s] >= CAP -> settled[i] = settled[i] | (1 << h_s)
       :: else ->
          sCnt[h_s]++; sOwn[h_s] = i + 1; sAtt[h_s] = sCnt[h_s]; sTTL[h_s] = LEASE;
          cs[i] = h_s; att[i] = sCnt[h_s]; vt[i] = VALID; rt[i] = true; wdon[i] = true;
          printf("r%d won slot %d attempt %d\n", i, h_s, att[i]);
          ph[i] = P_OCC
       fi;
       h_s = 0 }
  /* concurrency.go 55-95 occupy */
  :: atomic { ph[i] == P_OCC ->
#ifndef M_OCCUPY_NO_COMPARE
       if
#ifndef NO_OCCUPY_FAULTS
       :: can_fault -> faults--; o_res = O_ERR; printf("r%d occupy request LOST\n", i)
       :: can_fault -> faults--; occupy(i); o_res = O_ERR; printf("r%d occupy reply LOST\n", i)
       :: can_fault -> faults--; occupy(i); h_s = o_other; occupy(i); o_other = h_s; h_s = 0;
          printf("r%d occupy resent\n", i)  /* the second run answers */
#endif
       :: true -> occupy(i)
       fi;
#else
       /* kv update without the version compare: this read, a peer's
        * write, then this write: modelled as the read answering free */
       if
       :: true -> occupy(i)
       :: rSlot != 0 && rSlot != cs[i] + 1 -> SET_REC(i); o_res = O_TAKEN; o_other = 0
       fi;
#endif
       printf("r%d occupy slot %d: %e (other %d)\n", i, cs[i], o_res, o_other);
       if
       :: o_res == O_ERR -> fin_ok[i] = false; wdon[i] = false; ph[i] = P_FIN  /* execute 162-163: not started */
       :: o_res == O_BUSY -> fin_ok[i] = true; wdon[i] = false; ph[i] = P_FIN  /* skipForbidden: marked done */
#ifndef M_NO_AWAIT
       :: o_res == O_TAKEN && o_other != 0 -> os[i] = o_other; aw[i] = AWAIT; ph[i] = P_AWAIT;
#ifndef M_OLD_AWAIT
          rec[i] = true  /* a.rec stored before the await: renewed, and a replace cancels it */
#else
          skip
#endif
       :: o_res == O_TAKEN && o_other == 0 -> START(i)
#else
       :: o_res == O_TAKEN -> START(i)
#endif
       fi;
       o_res = O_ERR; o_other = 0 }
  /* concurrency.go 237-254 awaitStopped: the replaced slot no longer
   * running, or a lease and a poll passed */
  :: atomic { ph[i] == P_AWAIT && (!running(os[i] - 1) || aw[i] == 0 || cancelled[i]) ->
       if
       :: cancelled[i] -> ph[i] = P_RUN; tk[i] = T_END  /* lease lost or superseded meanwhile: not started */
       :: else -> os[i] = 0; START(i)
       fi }
  /* the watchdog (lock/lease.go, keepalive.go): validUntil passed */
  :: atomic { wdon[i] && vt[i] == 0 && ph[i] != P_DOWN ->
       printf("r%d lease lost: cancel\n", i);
       wdon[i] = false; CANCEL(i) }
  /* a renewal, then renewRecord (attempt.go 125-139, concurrency.go 188-213) */
  :: atomic { wdon[i] && vt[i] > 0 && !rt[i] && ph[i] != P_DOWN ->
       rt[i] = true;
       if
       :: can_fault -> faults--; printf("r%d renew request LOST\n", i)
       :: can_fault -> faults--; if :: key_mine(i) -> sTTL[cs[i]] = LEASE :: else fi;
          printf("r%d renew reply LOST\n", i)
       :: !key_mine(i) -> printf("r%d renew: not held\n", i); wdon[i] = false; CANCEL(i)
       :: key_mine(i) -> sTTL[cs[i]] = LEASE; vt[i] = VALID;
          if
          :: rec[i] ->
             if
             :: can_fault -> faults--; printf("r%d record renewal LOST\n", i)
             :: can_fault -> faults--; if :: rec_mine(i) -> rTTL = LEASE :: else fi;
                printf("r%d record renewal reply LOST\n", i)
#ifndef M_RENEW_NO_COMPARE
             :: rec_mine(i) -> rTTL = LEASE
             :: !rec_mine(i) ->
#else
             :: rSlot != 0 -> rTTL = LEASE
             :: rSlot == 0 ->
#endif
                printf("r%d record not held\n", i);
#ifndef REPLACE
                /* 202-207: forbid takes it again; busy: both run */
                occupy(i);
                printf("r%d record taken again: %e\n", i, o_res);
                o_res = O_ERR; o_other = 0
#else
                /* 208-212: replaced, cancel */
                assert(repl[i] || expired[i]);                          /* R3 */
                sup[i] = true; rec[i] = false; CANCEL(i)
#endif
             fi
          :: else
          fi
       fi }
  /* the task ended: vacate (execute 166, concurrency.go 218-232), then finish */
  :: atomic { ph[i] == P_RUN && tk[i] == T_END ->
       if
       :: rec[i] ->
          rec[i] = false;
          if
          :: can_fault -> faults--; printf("r%d vacate LOST\n", i)
          :: rec_mine(i) -> rSlot = 0; rOwn = 0; rAtt = 0; rTTL = 0
          :: !rec_mine(i)
          fi
       :: else
       fi;
       wdon[i] = false;
       fin_ok[i] = sup[i] || fin_ok[i] && !cancelled[i] && vt[i] > 0;
       ph[i] = P_FIN }
  /* finish: Complete or Release (lease.go; the slot's key compared) */
  :: atomic { ph[i] == P_FIN ->
       if
       :: can_fault -> faults--; printf("r%d finish LOST\n", i)
       :: fin_ok[i] && key_mine(i) -> sDone[cs[i]] = true; sTTL[cs[i]] = 0
       :: !fin_ok[i] && key_mine(i) -> sOwn[cs[i]] = 0; sTTL[cs[i]] = 0
       :: !key_mine(i)
       fi;
       printf("r%d finish slot %d attempt %d: %d\n", i, cs[i], att[i], fin_ok[i]);
       if
       :: fin_ok[i] || att[i] >= CAP -> settled[i] = settled[i] | (1 << cs[i])
       :: else
       fi;
       FORGET(i) }
  od
}

/* the task: ends, ok or failed, at any time */
proctype Task(byte i) {
end:
  do
  :: atomic { ph[i] == P_RUN && tk[i] == T_RUN -> fin_ok[i] = true; tk[i] = T_END }
  :: atomic { ph[i] == P_RUN && tk[i] == T_RUN -> fin_ok[i] = false; tk[i] = T_END }
  od
}

#define CRASH(i) \
  :: atomic { can_fault && ph[i] != P_DOWN && ph[i] != P_IDLE -> faults--; \
       printf("r%d CRASHED\n", i); FORGET(i); settled[i] = 0; ph[i] = P_DOWN } \
  :: atomic { ph[i] == P_DOWN -> ph[i] = P_IDLE; printf("r%d restarts\n", i) }

active proctype Env() {
end:
  do
  CRASH(0) CRASH(1)
  od
}

#define due(i) (ph[i] == P_IDLE && (claimable(i, 0) || claimable(i, 1)) || ph[i] == P_OCC || \
  ph[i] == P_AWAIT && (!running(os[i] - 1) || aw[i] == 0 || cancelled[i]) || \
  wdon[i] && (vt[i] == 0 || !rt[i]) || ph[i] == P_RUN && tk[i] == T_END || ph[i] == P_FIN)

active proctype Clock() {
  byte i;
end:
  do
  :: atomic { !due(0) && !due(1) ->
       i = 0;
       do
       :: i < N ->
          if :: vt[i] > 0 -> vt[i]-- :: else fi;
          if :: aw[i] > 0 -> aw[i]-- :: else fi;
          rt[i] = false;
          i++
       :: else -> break
       od;
       i = 0;
       do
       :: i < S ->
          if
          :: sTTL[i] > 0 -> sTTL[i]--;
             if :: sTTL[i] == 0 -> sOwn[i] = 0; sAtt[i] = 0 :: else fi
          :: else
          fi;
          i++
       :: else -> break
       od;
       i = 0;
#ifndef M_NO_RECORD_TTL
       if
       :: rTTL > 0 -> rTTL--;
          if
          :: rTTL == 0 ->
             if :: rOwn > 0 && rec[rOwn - 1] && rec_mine(rOwn - 1) -> expired[rOwn - 1] = true :: else fi;
             rSlot = 0; rOwn = 0; rAtt = 0
          :: else
          fi
       :: else
       fi;
#endif
       /* R4: a record whose holder died (or never learnt it won it) is
        * gone within a lease: the next slot of a forbid task can run */
       if
       :: rSlot != 0 && !(rec[rOwn - 1] && rec_mine(rOwn - 1)) -> stale++; assert(stale <= LEASE)
       :: else -> stale = 0
       fi;
       printf("tick\n");
       if :: !fired[1] -> if :: fired[1] = true; printf("slot 1 fires\n") :: skip fi :: else fi }
  od
}

init {
  atomic {
    fired[0] = true;
    run Replica(0); run Replica(1); run Task(0); run Task(1)
  }
}
#endif /* PART_RUNNING */
