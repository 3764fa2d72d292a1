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
 * running/<task> = "<slot> run:<owner>:<attempt>" with a TTL, and the
 * record a replace last took the place of, with a TTL:
 *   Occupy         occupy.lua 32-51; kv controls.go 397-437 (update 64-91);
 *                  memlock memory_controls.go 223-250
 *   RenewOccupancy renew.lua on the running key (redis_controls.go 282-285);
 *                  kv controls.go 440-452
 *   Vacate         release.lua on the running key (289-296); kv 455-467
 * and the engine (scheduler/attempt.go, concurrency.go):
 *   attempt.run (attempt.go 83-120): hold (the watchdog, 125-139), occupy,
 *     execute, finish
 *   occupy (concurrency.go 78-133): Occupy; busy: skipForbidden
 *     (attempt.go 321-346, the slot marked done); the record handed to the
 *     watchdog (keepRecord 228-233: a.rec, valid until lease - margin
 *     after the Occupy's send); replace with another slot answered:
 *     awaitStopped (329-346: that slot's state polled until not running,
 *     for at most a lease and a poll, or until the lease is lost; a
 *     superseded attempt, or one whose record was lost, still awaits, its
 *     slot reading running meanwhile)
 *   recordExpired, loseRecord (237-256): the record's validUntil passed
 *     with no renewal confirmed: the task is cancelled (ErrRecordLost)
 *   renewRecord (264-304): after each confirmed renewal of the slot; a
 *     confirmed one moves the record's validUntil; not held: forbid
 *     cancels the task (ErrRecordLost: it ran out), replace cancels it
 *     (ErrSuperseded)
 *   execute (attempt.go 144-178): not started after an Occupy error or a
 *     cancel during the await; else the task, then vacate (309-324)
 *   finish (183-193): superseded or succeeded: Complete; else Release
 * Faults (FAULTS): a store request lost, its reply lost (applied), an
 * Occupy resent after its first send landed (go-redis retries a script on
 * a network error: the second answers for both), a replica crashed (its
 * task dies with it, SPEC §8; it restarts knowing nothing).
 * Assumed, as slot.pml's A_STOP and A_NOSTALL: a cancelled task stops at
 * once (within the margin), and no replica is paused while a task runs.
 *
 * Properties:
 *   R1 (forbid), R2 (replace) a slot's task starts only while no other
 *      slot's task runs (replace: the replaced attempt has stopped before
 *      the next one's effects), with no exception: a holder whose record
 *      renewals fail while its slot's pass is cancelled at the record's
 *      validUntil, before the record can run out
 *   R3 (replace) a task is cancelled as superseded only when another
 *      slot's Occupy took its record
 *   R4 a record whose holder died, or never learnt that it was written
 *      (a lost reply), is gone within a lease: the next slot of a forbid
 *      task can run (bounded liveness, asserted at each tick)
 *   e_ends every slot that fired ends (done, skipped or exhausted), under
 *      weak fairness
 * Mutants: M_OCCUPY_NO_COMPARE (Occupy reads, then writes blind: kv's
 *   update without the version compare), M_NO_AWAIT (replace starts at
 *   once), M_RENEW_NO_COMPARE (RenewOccupancy extends any record: a
 *   replaced attempt never learns it), M_NO_RECORD_TTL (the record lives
 *   until vacated), and the code before this model's fixes:
 *   M_OLD_AWAIT (the record renewed only once the await ended),
 *   M_OLD_REPLACED (no replaced record: only the call that replaced
 *   answers it) and M_RECORD_NO_WATCHDOG (no validity of the record: a
 *   holder whose record renewals fail runs on; forbid takes an expired
 *   record again, "both run").
 *
 * TRIGGER and PAUSE: see their sections below.
 */

#ifndef FAULTS
#define FAULTS 1
#endif
#ifdef M_OLD_AWAIT
#define M_RECORD_NO_WATCHDOG 1  /* the code before finding 1 kept no record validity either */
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
byte pSlot;     /* the replaced record (occupy.lua's KEYS[2]): its slot+1 */
byte pTTL;

/* ---- replicas -------------------------------------------------------- */
byte ph[N];
byte cs[N];      /* the slot it holds */
byte att[N];
byte vt[N];      /* ticks to validUntil */
bool rt[N];      /* renewed this tick */
bool wdon[N];    /* the watchdog runs */
bool rec[N];     /* a.rec: the watchdog renews the record (until rlost), vacate removes it */
byte rv[N];      /* ticks to the record's validUntil (occupancy.validUntil) */
bool rlost[N];   /* the record was lost (recordExpired, loseRecord): renewed no more */
byte os[N];      /* replace: the slot+1 it awaits */
byte aw[N];      /* ticks left of awaitStopped */
byte tk[N];
bool cancelled[N];
bool sup[N];     /* cancelled as superseded */
bool fin_ok[N];  /* finish: complete, else release */
byte settled[N]; /* bit s: finished with slot s */

/* ---- ghosts ---------------------------------------------------------- */
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

/* occupy.lua 32-51, kv controls.go 400-420: another slot's record: forbid
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
     SET_REC(i); o_res = O_TAKEN;
#ifndef M_OLD_REPLACED
     pSlot = o_other; pTTL = LEASE
#else
     skip
#endif
#endif
  :: else -> SET_REC(i); o_res = O_TAKEN;
#ifdef REPLACE
     /* occupy.lua 39-45, kv 427-435: a slot replaced within a lease by an
      * earlier call of this slot's (a lost reply, a retry) */
     if :: pSlot != 0 && pSlot != cs[i] + 1 -> o_other = pSlot :: else fi
#else
     skip
#endif
  fi
}

/* R1, R2: at a task's start, no other slot's task runs */
#define START(i) \
  h_j = 1 - (i); \
  assert(!(task_runs(h_j) && cs[h_j] != cs[i])); /* R1, R2 */ \
  h_j = 0; tk[i] = T_RUN; rec[i] = true; ph[i] = P_RUN; \
  printf("r%d starts slot %d attempt %d\n", i, cs[i], att[i])

#define CANCEL(i) cancelled[i] = true; if :: tk[i] == T_RUN -> tk[i] = T_END :: else fi

#define FORGET(i) ph[i] = P_IDLE; att[i] = 0; vt[i] = 0; rt[i] = false; wdon[i] = false; \
  rec[i] = false; os[i] = 0; aw[i] = 0; tk[i] = T_NONE; cancelled[i] = false; sup[i] = false; \
  fin_ok[i] = false; repl[i] = false; rv[i] = 0; rlost[i] = false; cs[i] = 0

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
  /* concurrency.go 55-107 occupy */
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
       if :: o_res == O_TAKEN -> rv[i] = VALID :: else fi;  /* keepRecord: valid from the Occupy */
       if
       :: o_res == O_ERR -> fin_ok[i] = false; wdon[i] = false; ph[i] = P_FIN  /* execute 163-164: not started */
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
  /* concurrency.go 249-266 awaitStopped: the replaced slot no longer
   * running, or a lease and a poll passed */
  :: atomic { ph[i] == P_AWAIT && (!running(os[i] - 1) || aw[i] == 0 || cancelled[i] && !sup[i] && !rlost[i]) ->
       if
       /* execute 165-169: lease lost, or superseded (which still awaits
        * the end of the slot it replaced), meanwhile: not started */
       :: cancelled[i] -> ph[i] = P_RUN; tk[i] = T_END
       :: else -> os[i] = 0; START(i)
       fi }
  /* the watchdog (lock/lease.go, keepalive.go): validUntil passed */
  :: atomic { wdon[i] && vt[i] == 0 && ph[i] != P_DOWN ->
       printf("r%d lease lost: cancel\n", i);
       wdon[i] = false; CANCEL(i) }
#ifndef M_RECORD_NO_WATCHDOG
  /* concurrency.go recordExpired: the record's validUntil passed with no
   * renewal confirmed: cancel (ErrRecordLost), unless the lease's loss
   * cancelled the task first; the vacate still follows */
  :: atomic { rec[i] && !rlost[i] && rv[i] == 0 && !cancelled[i] && ph[i] != P_DOWN ->
       printf("r%d record lost: cancel\n", i);
       rlost[i] = true; CANCEL(i) }
#endif
  /* a renewal, then renewRecord (attempt.go 125-139, concurrency.go 200-225) */
  :: atomic { wdon[i] && vt[i] > 0 && !rt[i] && ph[i] != P_DOWN ->
       rt[i] = true;
       if
       :: can_fault -> faults--; printf("r%d renew request LOST\n", i)
       :: can_fault -> faults--; if :: key_mine(i) -> sTTL[cs[i]] = LEASE :: else fi;
          printf("r%d renew reply LOST\n", i)
       :: !key_mine(i) -> printf("r%d renew: not held\n", i); wdon[i] = false; CANCEL(i)
       :: key_mine(i) -> sTTL[cs[i]] = LEASE; vt[i] = VALID;
          if
          :: rec[i] && !rlost[i] ->
             if
             :: can_fault -> faults--; printf("r%d record renewal LOST\n", i)
             :: can_fault -> faults--; if :: rec_mine(i) -> rTTL = LEASE :: else fi;
                printf("r%d record renewal reply LOST\n", i)
#ifndef M_RENEW_NO_COMPARE
             :: rec_mine(i) -> rTTL = LEASE; rv[i] = VALID
             :: !rec_mine(i) ->
#else
             :: rSlot != 0 -> rTTL = LEASE; rv[i] = VALID
             :: rSlot == 0 ->
#endif
                printf("r%d record not held\n", i);
#ifndef REPLACE
#ifndef M_RECORD_NO_WATCHDOG
                /* forbid: gone (it ran out): lost, cancel (loseRecord) */
                rlost[i] = true; CANCEL(i)
#else
                /* the old code: forbid takes it again; busy: both run */
                occupy(i);
                printf("r%d record taken again: %e\n", i, o_res);
                o_res = O_ERR; o_other = 0
#endif
#else
                /* replaced, cancel (ErrSuperseded) */
                assert(repl[i]);                                        /* R3 */
                sup[i] = true; rec[i] = false; CANCEL(i)
#endif
             fi
          :: else
          fi
       fi }
  /* the task ended: vacate (execute 172, concurrency.go 230-244), then finish */
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

#ifndef M_RECORD_NO_WATCHDOG
#define REC_DUE(i) (rec[i] && !rlost[i] && rv[i] == 0 && !cancelled[i])
#else
#define REC_DUE(i) false
#endif
#define due(i) (ph[i] == P_IDLE && (claimable(i, 0) || claimable(i, 1)) || ph[i] == P_OCC || \
  ph[i] == P_AWAIT && (!running(os[i] - 1) || aw[i] == 0 || cancelled[i] && !sup[i] && !rlost[i]) || \
  REC_DUE(i) || \
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
          if :: rv[i] > 0 -> rv[i]-- :: else fi;
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
          :: rTTL == 0 -> rSlot = 0; rOwn = 0; rAtt = 0
          :: else
          fi
       :: else
       fi;
#endif
       /* R4: a record whose holder died (or never learnt it won it) is
        * gone within a lease: the next slot of a forbid task can run */
       if
       :: rSlot != 0 && !(rec[rOwn - 1] && !rlost[rOwn - 1] && rec_mine(rOwn - 1)) -> stale++; assert(stale <= LEASE)
       :: else -> stale = 0
       fi;
       if
       :: pTTL > 0 -> pTTL--; if :: pTTL == 0 -> pSlot = 0 :: else fi
       :: else
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

#ifdef PART_TRIGGER
/*
 * TRIGGER: `slotd trigger` with one idempotency key, sent to both
 * replicas and once more by a client whose reply was lost (REQS requests,
 * each landing at any tick), and the controllers that read the pending
 * triggers, arm each triggered slot and claim it:
 *   Trigger    trigger.lua 21-49; kv controls.go 166-205 (one
 *              compare-and-set of triggers/<task>: pending and keys)
 *   ArmTrigger arm.lua 13-18; etcd controls.go 35-55 (a Txn on the keys'
 *              versions), zklock controls.go 32-38 (create the slot node)
 *   controller.read (scheduler/controls.go 280-334): each pending
 *              trigger not yet passed on is armed, then claimed; an arm
 *              that fails is tried at the next read, never claimed unarmed
 * A trigger second is a tick (0..2); BASE is lock.TriggerBase scaled to
 * 2, max_attempts 2: a triggered slot's attempts are 3 and 4, a scheduled
 * slot's of the same second 1 and 2.
 * Properties: T1 one key starts at most one triggered slot; T2 a
 * triggered slot's attempt numbers exceed BASE (its tokens exceed those of
 * the scheduled slot of its second); T3 no attempt number of a triggered
 * slot runs twice.
 * Mutants: M_TRIGGER_NO_KEY (the key not looked up: T1),
 *   M_TRIGGER_NO_COMPARE (a read, then a blind write: T1), M_ARM_ALWAYS
 *   (arm without its "not armed or claimed" check: T3), M_CLAIM_UNARMED
 *   (a trigger claimed although its arm failed: T2).
 */
#define SECS  3
#define REQS  3
#define BASE  2
#define TCAP  2

byte now;          /* the store's clock: a second per tick */
byte pend;         /* pending triggers: bit per second */
byte keySec;       /* the key's trigger second + 1, 0: not seen */
byte cnt[SECS];    /* attempts key of each triggered slot (0: absent) */
byte base[SECS];
bool held[SECS];   /* a claim holds it */
bool done[SECS];
byte seen[N];      /* per replica: seconds passed to the loop (bits) */
byte ran[SECS];    /* ghost: attempt numbers that ran, bits */
byte started;      /* ghost: triggered slots that ran, bits */

#define tclaim(i, s) (((seen[i] >> (s)) & 1) && !held[s] && !done[s])
#define popcount3(x) (((x) & 1) + (((x) >> 1) & 1) + (((x) >> 2) & 1))

/* trigger.lua: a key seen answers "repeated"; else the second's trigger
 * is added (or coalesced) and the key recorded */
inline trigger() {
#ifndef M_TRIGGER_NO_KEY
  if
  :: keySec != 0 -> printf("trigger: repeated (second %d)\n", keySec - 1)
  :: else ->
#endif
     pend = pend | (1 << now); keySec = now + 1;
     printf("trigger: started at second %d\n", now)
#ifndef M_TRIGGER_NO_KEY
  fi
#endif
}

/* one request (to a replica, or a client's retry), landing at any tick */
proctype Request() {
  byte p, k;
#ifndef M_TRIGGER_NO_COMPARE
  atomic {
    if
    :: can_fault -> faults--; printf("trigger request LOST\n")
    :: true -> trigger()
    fi }
#else
  /* kv's update without the version compare: a read, then a blind write
   * (at a later tick, or after another request's write) */
  atomic { p = pend; k = keySec };
  atomic {
    if
    :: k == 0 -> pend = p | (1 << now); keySec = now + 1; printf("trigger (blind): started at second %d\n", now)
    :: else
    fi }
#endif
}

/* arm.lua: only a slot not armed or claimed */
inline arm(s) {
#ifndef M_ARM_ALWAYS
  if
  :: cnt[s] == 0 -> cnt[s] = BASE; base[s] = BASE
  :: else
  fi
#else
  cnt[s] = BASE; base[s] = BASE
#endif
}

proctype Replica(byte i) {
  byte s, a;
end:
  do
  /* controller.read: a pending trigger not yet passed on: arm, claim */
  :: atomic { (pend & ~seen[i]) != 0 ->
       if :: (pend >> 0) & 1 && !((seen[i] >> 0) & 1) -> s = 0
          :: (pend >> 1) & 1 && !((seen[i] >> 1) & 1) -> s = 1
          :: (pend >> 2) & 1 && !((seen[i] >> 2) & 1) -> s = 2
       fi;
       if
       :: can_fault -> faults--; printf("r%d arm %d request LOST\n", i, s);
#ifdef M_CLAIM_UNARMED
          seen[i] = seen[i] | (1 << s)
#endif
       :: can_fault -> faults--; arm(s); printf("r%d arm %d reply LOST\n", i, s)
       :: true -> arm(s); seen[i] = seen[i] | (1 << s); printf("r%d armed %d\n", i, s)
       fi }
  /* the loop claims a trigger passed on (claim.lua: cap on n - base) */
  :: atomic { a == 0 && (tclaim(i, 0) || tclaim(i, 1) || tclaim(i, 2)) ->
       if :: tclaim(i, 0) -> s = 0 :: tclaim(i, 1) -> s = 1 :: tclaim(i, 2) -> s = 2 fi;
       if
       :: cnt[s] - base[s] < TCAP ->
          cnt[s]++; a = cnt[s]; held[s] = true;
          assert(a > BASE);                            /* T2 */
          assert(((ran[s] >> a) & 1) == 0);             /* T3 */
          ran[s] = ran[s] | (1 << a);
          started = started | (1 << s);
          assert(popcount3(started) <= 1);              /* T1 */
          printf("r%d runs trigger %d attempt %d\n", i, s, a)
       :: else -> seen[i] = seen[i] & ~(1 << s)  /* exhausted: settled */
       fi }
  /* the attempt ends: done, or released for a retry */
  :: atomic { a != 0 -> done[s] = true; held[s] = false; a = 0 }
  :: atomic { a != 0 -> held[s] = false; a = 0 }
  od
}

active proctype Clock() {
end:
  do
  :: atomic { now < SECS - 1 -> now++; printf("tick\n") }
  od
}

init {
  atomic { run Replica(0); run Replica(1); run Request(); run Request(); run Request() }
}
#endif /* PART_TRIGGER */

#ifdef PART_PAUSE
/*
 * PAUSE: `slotd pause` landing at any tick, and 2 replicas whose loop
 * fires a slot of the task at every tick unless its controller knows the
 * task paused:
 *   SetPaused  pause.lua 23-49; kv controls.go 236-259: the state written,
 *              the task's notice sent (pub/sub: lost per replica), the
 *              epoch changed (Redis: bump, redis_controls.go 195-201, a
 *              call of its own; kv: notify 96-107; either may be lost)
 *   controller (scheduler/controls.go): first (57-67) reads the state
 *              before the loop fires anything (a read that fails leaves
 *              the config's value, here not paused); run (150-194) reads
 *              on a notice, and at each clock check (CHECK ticks) if the
 *              epoch changed since its last read that the store answered
 *              (ep: a failed read records no epoch) or a sweep (SWEEP
 *              ticks) is due; read (280-301) tells the loop. A notice's
 *              read records no epoch in the code, nor does a check's read
 *              that failed restart the sweep: more reads than modelled,
 *              never fewer
 *   loop       skipPaused (run.go 173-180: the loop keeps the paused tasks
 *              only, setPaused) at each fire (loop.go 212, 235)
 * Faults: a notice lost, the epoch change lost, a read lost, a replica
 * crashed (it restarts knowing nothing: the state in the store stands).
 * Property: P1 no replica fires a slot more than a bound after the pause
 * landed: a clock check (CHECK+1 ticks), or a sweep if the epoch change
 * was lost, unless its last read failed (it goes on as it last knew until
 * the next clock check; a restarted one whose first read failed, as its
 * config says, as first documents).
 * Mutants: M_PAUSE_NOT_READ (a fire does not look at the pause),
 *   M_FIRE_BEFORE_FIRST (a restarted replica fires before its first read).
 */
#define CHECK 2
#define SWEEP 4

bool pst;         /* the store's state: paused */
bool bumped;      /* the epoch changed after it */
byte pt;          /* ticks since the pause landed (capped) */
bool lp[N];       /* the controller's view: paused */
bool up[N];
bool rd[N];       /* first has read (or failed) since the start */
bool ff[N];       /* its last read failed */
bool ep[N];       /* its last read saw the epoch change */
bool nt[N];       /* a notice is pending */
bool fd[N];       /* a slot's fire is due */
byte ck[N];       /* ticks to the clock check */
byte sw[N];       /* ticks to the sweep */
bool opDone;

#define BOUND (bumped -> CHECK + 1 : SWEEP + 1)

inline readPause(i) {
  if
  :: can_fault -> faults--; printf("r%d read LOST\n", i); ff[i] = true
  :: true -> lp[i] = pst; ep[i] = bumped; ff[i] = false; printf("r%d read: paused %d\n", i, pst)
  fi;
  rd[i] = true
}

active proctype Operator() {
  atomic {
    pst = true; pt = 0; printf("operator: pause\n");
    if :: can_fault -> faults--; printf("epoch change LOST\n") :: bumped = true fi;
    if :: up[0] -> if :: can_fault -> faults--; printf("r0 notice LOST\n") :: nt[0] = true fi :: else fi;
    if :: up[1] -> if :: can_fault -> faults--; printf("r1 notice LOST\n") :: nt[1] = true fi :: else fi;
    opDone = true }
}

proctype Replica(byte i) {
end:
  do
  :: atomic { up[i] && !rd[i] -> readPause(i) }                     /* first */
  :: atomic { up[i] && rd[i] && nt[i] -> nt[i] = false; readPause(i) }
  :: atomic { up[i] && rd[i] && ck[i] == 0 ->
       ck[i] = CHECK;
       if
       :: bumped != ep[i] || sw[i] == 0 -> sw[i] = SWEEP; readPause(i)
       :: else
       fi }
#ifndef M_FIRE_BEFORE_FIRST
  :: atomic { up[i] && rd[i] && fd[i] ->
#else
  :: atomic { up[i] && fd[i] ->
#endif
       fd[i] = false;
#ifndef M_PAUSE_NOT_READ
       if
       :: lp[i] -> printf("r%d skips a slot: paused\n", i)
       :: else ->
#endif
          assert(!(pst && pt >= BOUND && !ff[i]));   /* P1 */
          printf("r%d fires a slot\n", i)
#ifndef M_PAUSE_NOT_READ
       fi
#endif
       }
  :: atomic { up[i] && can_fault -> faults--; printf("r%d CRASHED\n", i);
       up[i] = false; lp[i] = false; rd[i] = false; ff[i] = false; ep[i] = false; nt[i] = false; fd[i] = false }
  /* a restart fires the slot whose window is open (catchup = "latest",
   * loop.go 170-190), after first */
  :: atomic { !up[i] -> up[i] = true; ck[i] = CHECK; sw[i] = SWEEP; fd[i] = true; printf("r%d restarts\n", i) }
  od
}

#define pdue(i) (up[i] && (!rd[i] || nt[i] || ck[i] == 0 || fd[i]))

active proctype Clock() {
end:
  do
  :: atomic { !pdue(0) && !pdue(1) ->
       if :: ck[0] > 0 -> ck[0]-- :: else fi;
       if :: ck[1] > 0 -> ck[1]-- :: else fi;
       if :: sw[0] > 0 -> sw[0]-- :: else fi;
       if :: sw[1] > 0 -> sw[1]-- :: else fi;
       if :: pst && pt < SWEEP + 1 -> pt++ :: else fi;
       fd[0] = up[0]; fd[1] = up[1];
       printf("tick\n") }
  od
}

init {
  atomic {
    up[0] = true; up[1] = true; ck[0] = CHECK; ck[1] = CHECK; sw[0] = SWEEP; sw[1] = SWEEP;
    run Replica(0); run Replica(1)
  }
}
#endif /* PART_PAUSE */
