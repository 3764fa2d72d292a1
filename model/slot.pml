/*
 * slot.pml: slotd's slot protocol (lock/redislock/*.lua, lock/lease.go,
 * lock/internal/keepalive/keepalive.go, scheduler/scheduler.go) as a Promela model for spin.
 * See docs/model.md. Run everything with model/check.
 *
 * One slot of one task. A store (one Redis server: the state key, the
 * attempts counter, the base key, pub/sub), N replicas each made of a main
 * loop (scheduler.slotRun), a lease watchdog (lock.Lease + keeper) and a
 * task, a fenced sink the tasks write their result to, an operator who may
 * rerun the slot, and an environment that injects faults: pauses, crashes,
 * lost requests and replies, requests that land late, lost pub/sub notices,
 * claim replies that come late.
 *
 * Time is discrete. Every timer is a count-down that the clock decrements at
 * each tick (so the state space is finite without a horizon). A replica's
 * steps take no time: the clock does not tick while a running replica has a
 * step due (urgency), unless it is paused. The store's key expires by the
 * store's clock: at the tick its TTL reaches 0.
 *
 * Compile-time switches (spin -D...):
 *   assumptions (on by default; NO_x drops one):
 *     A_STOP     a cancelled task stops within the lease margin (before the
 *                key can expire). NO_A_STOP: it may take lease/3 more.
 *     A_NOSTALL  a replica is not paused while its task runs.
 *     A_NOFORCE  the operator never reruns with -force.
 *   mutants (each must give a counterexample):
 *     M_RELEASE_NO_OWNER M_RENEW_NO_OWNER M_NO_CAP M_CLAIM_NO_CLOCK
 *     M_COMPLETE_NO_OWNER M_WD_AFTER_EXPIRY M_SINK_NO_FENCE
 *     M_CLAIM_NO_BACKOFF
 *   PROP_B_ONCE  also assert the literal "one accepted result per
 *                generation" (fails: slotd is at-least-once; docs).
 *   FAULTS=n, RERUNS=n, CAP=n, N is fixed at 3.
 */

#ifndef NO_A_STOP
#define A_STOP 1
#endif
#ifndef NO_A_NOSTALL
#define A_NOSTALL 1
#endif
#ifndef NO_A_NOFORCE
#define A_NOFORCE 1
#endif

#define N      3
#define LEASE  3   /* ticks: lease */
#define MARGIN 1   /* leaseMargin (lease/10, >= 1 tick here) */
#define RENEW  1   /* keeper interval, lease/3 */
#define VALID  (LEASE - MARGIN) /* validUntil - lastSent */
#ifndef CAP
#define CAP    2   /* max_attempts */
#endif
#define MAXN   3   /* "n >= 999" in claim.lua, scaled down */
#define SLOT   1   /* ticks from the start to the slot time */
#define BACKOFF 2  /* a release's retry backoff (retry_backoff), in ticks */
#ifndef FAULTS
#define FAULTS 2   /* faults of any kind in one run */
#endif
#ifndef RERUNS
#define RERUNS 1
#endif

#ifdef A_STOP
#define STOP_EXTRA 0          /* stops within MARGIN: before the key expires */
#else
#define STOP_EXTRA RENEW      /* "within lease/3" */
#endif

/* claim results (lock.Result) */
mtype = { R_WON, R_HELD, R_DONE, R_EXH, R_EARLY, R_LATE, R_ERR, R_WAITREPLY };

/* replica phases (scheduler.slotRun, lock.Lease) */
#define P_IDLE     0  /* before its own fire time; no run yet */
#define P_CLAIM    1  /* step: claim tnow */
#define P_WAIT     2  /* parked on a timer (held, early, error, handoff) */
#define P_AWAIT    3  /* won, the claim's reply not yet back */
#define P_RUN      4  /* attempt: task + watchdog */
#define P_COMPLETE 5  /* Lease.Complete */
#define P_RELEASE  6  /* Lease.Release */
#define P_SETTLED  7  /* parkSettled: waits only for a rerun notice */
#define P_DOWN     8  /* crashed */
#define P_HANDOFF  9  /* busy between handle() and park() after its own failed attempt */

/* task states */
#define T_NONE 0
#define T_RUN  1  /* started, not stopped: what (a) counts */
#define T_OK   2  /* returned nil */
#define T_FAIL 3  /* returned an error (or was cancelled) */

/* notices (slotRun.news) */
#define NO_NEWS  0
#define RELEASED 1
#define DONE     2

/* late requests: sent, given up on by the sender, landing later */
#define L_NONE     0
#define L_CLAIM    1
#define L_RENEW    2
#define L_COMPLETE 3
#define L_RELEASE  4

/* ---- store: one Redis server ---------------------------------------- */
byte kown;       /* state key: replica+1 of the value, 0 = no key */
byte katt;       /* the attempt in the value */
bool kdone;      /* "done:..." (no TTL in the model: done_ttl > window) */
byte kttl;       /* "run:...": ticks left; 0 = expired/absent */
byte cnt;        /* attempts key */
byte base;       /* base key (0 = absent) */
byte knb;        /* "backoff:<not-before>" state: ticks until it ends (its PX); 0 = none */
byte to_slot = SLOT; /* ticks until the slot time, by the store's clock */
bool closed;     /* the slot's deadline has passed (any tick after the slot time) */

/* ---- replicas ------------------------------------------------------- */
byte ph[N];      /* phase */
byte att[N];     /* attempt held (owner value run:i:att) */
byte abase[N];   /* Claim.Base of that attempt */
byte vt[N];      /* ticks until validUntil (lastSent + LEASE - MARGIN) */
byte rt[N];      /* ticks until the next renewal */
byte wt[N];      /* park timer / fire timer */
bool wdon[N];    /* watchdog running */
bool lost[N];    /* lease lost */
byte news[N];
bool handoff[N]; /* slotRun.handingOff */
bool paused[N];
byte tk[N];      /* task */
bool cancelled[N];
byte tst[N];     /* ticks left for a cancelled task to stop */
bool wrote[N];   /* the task wrote its result to the sink */
byte late[N];    /* a late request of replica i, L_* */
byte latt[N];    /* its attempt */
bool doubt[N];   /* doubt.go: replica i's last claim got no reply, or found its own unanswered one */
byte ran[N];     /* doubt.go: the highest attempt replica i was answered won */
bool asked[N];   /* doubt.go: replica i has asked for a take-over (once per slot) */
byte ldoubt[N];  /* the in-doubt argument its late claim request carries */

/* ---- sink and ghosts ------------------------------------------------ */
byte sink_max;   /* the sink's fence: highest token accepted */
byte acc_max;    /* ghost: highest token accepted (b) */
byte acc[2];     /* ghost: results accepted per generation (PROP_B_ONCE) */
byte rbase = 255;/* ghost: base set by the rerun, 255 = none */
byte done_att;   /* ghost: attempt that marked the slot done in this generation (b) */
byte faults = FAULTS;

/* temporaries of the atomic steps: not part of the state */
hidden mtype h_res;
hidden byte tnow;  /* ticks so far, for the trail's printouts only */
hidden byte h_w, h_j, s_own, s_att, s_ttl;
hidden byte h_ok, s_done;
hidden byte h_d;   /* a claim's in-doubt argument: 0 none, else the least attempt it may take over */
byte reruns = RERUNS;

#define key_run         (kttl > 0 && !kdone)
#define key_mine(i)     (key_run && kown == (i) + 1 && katt == att[i])
#define running(i)      (tk[i] == T_RUN)
/* claim.lua 166-176: replica i's claim with in-doubt argument d takes the
 * key over: its own value, of an attempt it was never answered won for */
#ifdef M_TAKEOVER_ANY_OWNER
#define TAKEOVER(i, d)  ((d) > 0 && katt >= (d) && !closed)
#elif defined(M_TAKEOVER_RAN)
#define TAKEOVER(i, d)  ((d) > 0 && kown == (i) + 1 && !closed)
#else
#define TAKEOVER(i, d)  ((d) > 0 && kown == (i) + 1 && katt >= (d) && !closed)
#endif
#define gen_of(a)       ((rbase != 255 && (a) > rbase) -> 1 : 0)

/* ---- properties ----------------------------------------------------- */
/* (a) no two tasks of the slot run at once (needs A_STOP, A_NOSTALL, A_NOFORCE) */
#define inv_a1 ((running(0) + running(1) + running(2)) <= 1)
/* (a) a replica whose watchdog holds the lease, before its own validUntil,
 * is the store's holder: its view of its lease is never wrong */
#define view_ok(i) (!(wdon[i] && vt[i] > 0) || key_mine(i))
#define inv_a2 (view_ok(0) && view_ok(1) && view_ok(2))
/* (g) no claim is won while a release's retry backoff holds the slot:
 * assertion in claim_lua */
/* (c) attempts since the last rerun never exceed the cap */
#define inv_c  (cnt - base <= CAP || base > cnt)
/* exhausted, as claim.lua decides it, and the end of the slot (e) */
#define exhausted ((cnt >= base && cnt - base >= CAP) || cnt >= MAXN)
#define ended  (kdone || (exhausted && !key_run) || closed)

ltl e_ends { [] <> ended }

/* a fault, if the budget allows; NOTICE_FAULTS_ONLY: only lost notices */
#ifndef NOTICE_FAULTS_ONLY
#define can_fault (faults > 0)
#define can_lose  (faults > 0)
#else
#define can_fault false
#define can_lose  (faults > 0)
#endif

/* publish(kind): PUBLISH of release.lua/rerun.lua (RELEASED) or complete.lua
 * (DONE), delivered to every subscribed replica as slotRun.wake would take
 * it; a notice may be lost (a fault). */
inline publish(kind) {
  h_j = 0;
  do
  :: h_j < N ->
     if
     :: ph[h_j] == P_IDLE || ph[h_j] == P_DOWN -> skip /* no run: not watching */
     :: else ->
        if
        :: can_lose -> faults--; printf("@%d notice %d to r%d LOST\n", tnow, kind, h_j) /* lost notice */
        :: true ->
           if
           :: kind == RELEASED && handoff[h_j] -> skip /* wake: our own release, probably */
           :: kind == DONE && ph[h_j] == P_SETTLED -> skip
           :: kind == DONE && ph[h_j] == P_WAIT ->  /* parked on its timer: settled at once */
              ph[h_j] = P_SETTLED; news[h_j] = NO_NEWS; handoff[h_j] = false; wt[h_j] = 0
           :: else -> news[h_j] = kind
           fi
        fi
     fi;
     h_j++
  :: else -> break
  od
}

/* claim.lua lines 153-218 (one slot): state first, then the clock, the
 * deadline, the cap, then the counter (SET NX PX of the first attempt, or
 * GET and SET PX of the next) + SET PX. The script checks a free state
 * inside the window by writing it (SET NX PX, 162; an ended backoff
 * is written over alike, 206) before it counts (214-217),
 * and deletes it again if it may not (111-151): one atomic step, the same
 * outcome as this order. A replica's own "run:" value,
 * when its last claim got no reply (d > 0: doubt.go), is taken over if
 * its attempt is one it was never answered won for (katt >= d):
 * its lease set again, won with the attempt it holds (katt). The script reads the base key
 * only beside a counter; here base is 0 whenever cnt is (the rerun sets
 * it from cnt), so skipping that read changes nothing modelled. */
inline claim_lua(i, res, w, d) {
  if
  :: kdone -> res = R_DONE                                 /* 155-157 */
  :: key_run && TAKEOVER(i, d) -> kttl = LEASE; res = R_WON  /* 142-152: its own claim in doubt */
  :: key_run && !TAKEOVER(i, d) -> res = R_HELD; w = kttl  /* 153 */
#ifndef M_CLAIM_NO_BACKOFF
  :: knb > 0 -> res = R_EARLY; w = knb                     /* 158-171: a retry backoff */
#endif
  :: else ->
     if
#ifndef M_CLAIM_NO_CLOCK
     :: to_slot > 0 -> res = R_EARLY; w = to_slot          /* 174-176 */
#endif
     :: closed -> res = R_LATE                              /* 177-179 */
#ifndef M_NO_CAP
     :: (cnt >= base && cnt - base >= CAP) || cnt >= MAXN -> res = R_EXH /* 96-98 */
#else
     :: cnt >= MAXN -> res = R_EXH
#endif
     :: else ->                                             /* 76-123, 180-184 */
        cnt++;
        assert(knb == 0);                                   /* (g) */
        kown = i + 1; katt = cnt; kdone = false; kttl = LEASE; knb = 0;
        res = R_WON;
        assert(to_slot == 0);                               /* (f) */
        assert(cnt - base <= CAP)                           /* (c) */
     fi
  fi
}

/* renew.lua lines 14-22: PEXPIRE if the value is the caller's. */
inline renew_lua(i, a, ok) {
  if
  :: key_run && kown == i + 1 && katt == a -> kttl = LEASE; ok = true
#ifdef M_RENEW_NO_OWNER
  :: else -> if :: kdone -> skip :: else -> kttl = (kown > 0 -> LEASE : 0) fi; ok = (kown > 0)
#else
  :: else -> ok = false                   /* (d): nothing changed */
#endif
  fi
}

/* release.lua lines 17-40: DEL, or SET the backoff value PX backoff, +
 * PUBLISH, if the value is the caller's. Every task at once: one without
 * retry_backoff (or a last attempt) releases with none. */
inline release_lua(i, a) {
  if
  :: key_run && kown == i + 1 && katt == a ->
     kown = 0; katt = 0; kttl = 0;
     if :: knb = 0 :: knb = BACKOFF fi;
     publish(RELEASED)
#ifdef M_RELEASE_NO_OWNER
  :: else -> if :: kdone -> skip :: else -> kown = 0; katt = 0; kttl = 0; publish(RELEASED) fi
#else
  :: else -> skip                         /* (d): nothing changed */
#endif
  fi
}

/* complete.lua lines 118-146: SET done if the value is the caller's; 1 also
 * when already done by the caller. The history entry it may append in the
 * same step (lines 77-109, 131-135) writes no slot key: not modelled. It
 * publishes nothing since 2026-11-30; a completer from before named the
 * slot in the call's one done message. A fleet mid-upgrade has both, so
 * either may happen here, beside a notice lost as a fault. */
inline complete_lua(i, a, ok) {
  if
  :: key_run && kown == i + 1 && katt == a ->
     kdone = true; kttl = 0;                                /* 95-104 */
     assert(done_att == 0 || done_att == a);                /* (b): one success */
     done_att = a; ok = true;
     if :: publish(DONE) :: skip fi                         /* before 2026-11-30; now none */
  :: kdone && kown == i + 1 && katt == a -> ok = true       /* 105-106 */
#ifdef M_COMPLETE_NO_OWNER
  :: else ->
     kown = i + 1; katt = a; kdone = true; kttl = 0;
     assert(done_att == 0 || done_att == a);
     done_att = a; ok = true; if :: publish(DONE) :: skip fi
#else
  :: else -> ok = false                                     /* (d) */
#endif
  fi
}

/* rerun.lua lines 19-39 */
inline rerun_lua() {
  if
#ifdef A_NOFORCE
  :: key_run -> skip                                        /* refused: running */
#endif
  :: else ->                                                /* 29-38 */
     kown = 0; katt = 0; kdone = false; kttl = 0; knb = 0;
     if :: cnt > 0 -> base = cnt :: else -> base = 0 fi;
     rbase = cnt; done_att = 0;
     publish(RELEASED)
  fi
}

/* the owner check of (d): a renew/release/complete by a non-holder leaves
 * the state key as it was */
#define snap   s_own = kown; s_att = katt; s_done = kdone; s_ttl = kttl
#define same   (s_own == kown && s_att == katt && s_done == kdone && s_ttl == kttl)
#define holder(i, a) ((key_run || kdone) && kown == (i) + 1 && katt == (a))

/* the fenced sink: a result is accepted only with a token above any
 * accepted; token = slot*1000 + attempt, here the attempt */
inline sink_write(i) {
  if
#ifndef M_SINK_NO_FENCE
  :: att[i] > sink_max ->
#else
  :: true ->
#endif
     printf("@%d r%d sink: token %d accepted\n", tnow, i, att[i]);
     assert(att[i] > acc_max);                /* (b): accepted tokens only grow */
     sink_max = att[i]; acc_max = att[i];
#ifdef PROP_B_ONCE
     acc[gen_of(att[i])]++;
     assert(acc[gen_of(att[i])] <= 1);
#endif
  :: else -> printf("@%d r%d sink: token %d rejected\n", tnow, i, att[i]) /* rejected: stale writer */
  fi
}

/* a step is due for replica i: the clock waits for it (unless paused) */
#define main_due(i) ((ph[i] == P_IDLE && wt[i] == 0) || ph[i] == P_CLAIM || \
  (ph[i] == P_WAIT && (wt[i] == 0 || news[i] != NO_NEWS)) || \
  (ph[i] == P_SETTLED && news[i] == RELEASED) || \
  (ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL)) || \
  ph[i] == P_COMPLETE || ph[i] == P_RELEASE || ph[i] == P_HANDOFF)
/* the attempt's local state is dead once the attempt is over: forget it
 * (fewer states, same behaviour) */
#define FORGET(i) att[i] = 0; abase[i] = 0; vt[i] = 0; rt[i] = 0; tst[i] = 0; \
  wrote[i] = false; cancelled[i] = false; lost[i] = false

#define wd_due(i)   (ph[i] == P_RUN && wdon[i] && (vt[i] == 0 || rt[i] == 0))
#ifdef M_WD_AFTER_EXPIRY
#undef wd_due
#define wd_due(i)   (ph[i] == P_RUN && wdon[i] && rt[i] == 0)
#endif
#define task_due(i) (running(i) && cancelled[i] && tst[i] == 0)
#define due(i)      (ph[i] != P_DOWN && !paused[i] && (main_due(i) || wd_due(i) || task_due(i)))

/* replica i's main loop: scheduler.slotRun.step/handle/attempt */
proctype Replica(byte i) {
end:
  do
  /* the fire time by this replica's clock (which may run ahead of the store's) */
  :: atomic { !paused[i] && ph[i] == P_IDLE && wt[i] == 0 -> ph[i] = P_CLAIM }
  /* claim (scheduler.go claim/handle; redis.go Claim) */
  :: atomic { !paused[i] && ph[i] == P_CLAIM ->
       handoff[i] = false; h_w = 0;
       h_d = ((doubt[i] && !asked[i]) -> ran[i] + 1 : 0); /* claimArgs takes the record */
       if :: h_d > 0 -> doubt[i] = false; asked[i] = true :: else fi;
       if
       :: claim_lua(i, h_res, h_w, h_d)
       :: can_fault -> faults--; h_res = R_ERR; doubt[i] = true; printf("@%d r%d claim request LOST\n", tnow, i)
       :: can_fault -> faults--; claim_lua(i, h_res, h_w, h_d); printf("@%d r%d claim reply LOST (was %e)\n", tnow, i, h_res); h_res = R_ERR; doubt[i] = true
       :: can_fault && late[i] == L_NONE -> faults--; late[i] = L_CLAIM; ldoubt[i] = h_d; h_res = R_ERR; doubt[i] = true; printf("@%d r%d claim request DELAYED\n", tnow, i)
       :: can_fault -> faults--; claim_lua(i, h_res, h_w, h_d); printf("@%d r%d claim reply DELAYED\n", tnow, i)
          if
          :: h_res == R_WON -> h_res = R_WAITREPLY
          :: else -> skip
          fi
       fi;
       if
       :: true -> printf("@%d r%d claim: %e (attempts %d, base %d)\n", tnow, i, h_res, cnt, base)
       fi;
       if
       :: h_res == R_WON -> /* lock.Hold: watchdog; the task starts under its context */
          att[i] = katt; ran[i] = katt; abase[i] = base; vt[i] = VALID; rt[i] = RENEW;
          wdon[i] = true; lost[i] = false; cancelled[i] = false; wrote[i] = false;
          tk[i] = T_RUN; ph[i] = P_RUN
       :: h_res == R_WAITREPLY -> /* Claim.Sent is tnow: validity counts from here */
          att[i] = katt; abase[i] = base; vt[i] = VALID; ph[i] = P_AWAIT
       :: h_res == R_HELD && kown == i + 1 && katt > ran[i] && !asked[i] -> /* held by its own unanswered claim */
          doubt[i] = true; ph[i] = P_CLAIM                          /* (a resend landed twice): once more, asking */
       :: h_res == R_HELD && !(kown == i + 1 && katt > ran[i] && !asked[i]) -> wt[i] = h_w; ph[i] = P_WAIT /* its lease (+ jitter < a tick) */
       :: h_res == R_EARLY -> wt[i] = h_w; ph[i] = P_WAIT
       :: h_res == R_ERR -> wt[i] = 1; ph[i] = P_WAIT               /* backoff */
       :: else -> ph[i] = P_SETTLED                                 /* done, exhausted, late */
       fi;
       h_res = R_ERR; h_w = 0; h_d = 0 }
  /* parked: timer or notice (park, wake, takeNews) */
  :: atomic { !paused[i] && ph[i] == P_WAIT && (wt[i] == 0 || news[i] != NO_NEWS) ->
       if
       :: news[i] == DONE -> ph[i] = P_SETTLED
       :: else -> ph[i] = P_CLAIM
       fi;
       news[i] = NO_NEWS; handoff[i] = false; wt[i] = 0 }
  /* settled: only a rerun's notice wakes it (parkSettled) */
  :: atomic { !paused[i] && ph[i] == P_SETTLED && news[i] == RELEASED ->
       news[i] = NO_NEWS; ph[i] = P_CLAIM }
  /* the task returned: attempt() finishes the lease (Lease.finish stops the watchdog) */
  :: atomic { !paused[i] && ph[i] == P_RUN && (tk[i] == T_OK || tk[i] == T_FAIL) ->
       wdon[i] = false;
       if
       :: tk[i] == T_OK && !cancelled[i] -> ph[i] = P_COMPLETE
       :: else -> ph[i] = P_RELEASE
       fi;
       tk[i] = T_NONE }
  /* Lease.Complete: retried while the lease is valid (lease.go 154-206) */
  :: atomic { !paused[i] && ph[i] == P_COMPLETE ->
       if
       :: lost[i] || vt[i] == 0 -> ph[i] = P_SETTLED; printf("@%d r%d succeeded, lease lost: not marked done\n", tnow, i) /* "task succeeded but the slot could not be marked done" */
       :: else ->
          snap;
          if
          :: complete_lua(i, att[i], h_ok); ph[i] = P_SETTLED; printf("@%d r%d complete attempt %d: %d\n", tnow, i, att[i], h_ok)
          :: can_fault -> faults--; printf("@%d r%d complete request LOST\n", tnow, i)  /* retried */
          :: can_fault -> faults--; complete_lua(i, att[i], h_ok); printf("@%d r%d complete reply LOST\n", tnow, i)
          :: can_fault && late[i] == L_NONE -> faults--; late[i] = L_COMPLETE; latt[i] = att[i]; ph[i] = P_SETTLED; printf("@%d r%d complete request DELAYED\n", tnow, i)
          fi;
          assert(s_own == i + 1 && s_att == att[i] || same)          /* (d) */
       fi;
       if :: ph[i] == P_SETTLED -> FORGET(i) :: else fi;
       h_ok = false }
  /* Lease.Release, then handle(): the cap check and the handoff pause */
  :: atomic { !paused[i] && ph[i] == P_RELEASE ->
       if
       :: !lost[i] && vt[i] > 0 ->
          snap;
          if
          :: release_lua(i, att[i]); printf("@%d r%d release attempt %d\n", tnow, i, att[i])
          :: can_fault -> faults--; printf("@%d r%d release request LOST\n", tnow, i)
          :: can_fault -> faults--; release_lua(i, att[i]); printf("@%d r%d release reply LOST\n", tnow, i)
          :: can_fault && late[i] == L_NONE -> faults--; late[i] = L_RELEASE; latt[i] = att[i]; printf("@%d r%d release request DELAYED\n", tnow, i)
          fi;
          assert(s_own == i + 1 && s_att == att[i] || same)          /* (d) */
       :: else -> skip                                               /* lost: not ours either way */
       fi;
       news[i] = NO_NEWS;
       if
       :: att[i] - abase[i] >= CAP -> ph[i] = P_SETTLED             /* its last allowed attempt */
       :: else -> handoff[i] = true; ph[i] = P_HANDOFF              /* let a peer go first */
       fi;
       FORGET(i) }
  /* step → park after handle(): a notice that came meanwhile is looked at now */
  :: atomic { !paused[i] && ph[i] == P_HANDOFF ->
       if
       :: news[i] == DONE -> ph[i] = P_SETTLED; handoff[i] = false
       :: news[i] == RELEASED -> ph[i] = P_CLAIM; handoff[i] = false
       :: else -> ph[i] = P_WAIT; wt[i] = 0                          /* the handoff pause (< a tick) */
       fi;
       news[i] = NO_NEWS }
  od
}

#ifndef M_WD_AFTER_EXPIRY
#define RENEW_WHILE(i) (vt[i] > 0)   /* keeper.tick: until <= 0 ends it */
#else
#define RENEW_WHILE(i) true          /* mutant: renews on after validUntil */
#endif

/* replica i's lease watchdog: keeper.tick/schedule (lock/internal/keepalive/keepalive.go 176-240) */
proctype Watchdog(byte i) {
end:
  do
#ifndef M_WD_AFTER_EXPIRY
  /* no renewal confirmed before validUntil: errNoRenewal, cancel the task */
  :: atomic { !paused[i] && ph[i] == P_RUN && wdon[i] && vt[i] == 0 ->
       printf("@%d r%d lease lost (no renewal confirmed): cancel\n", tnow, i);
       wdon[i] = false; lost[i] = true; cancelled[i] = true; tst[i] = STOP_EXTRA }
#endif
  :: atomic { !paused[i] && ph[i] == P_RUN && wdon[i] && rt[i] == 0 && RENEW_WHILE(i) ->
       snap;
       if
       :: renew_lua(i, att[i], h_ok);
          if
          :: h_ok -> vt[i] = VALID; rt[i] = RENEW                    /* renewed(sent) */
          :: else -> printf("@%d r%d renew: not held, cancel\n", tnow, i); wdon[i] = false; lost[i] = true; cancelled[i] = true; tst[i] = STOP_EXTRA /* ErrNotHeld */
          fi
       :: can_fault -> faults--; rt[i] = 1; printf("@%d r%d renew request LOST\n", tnow, i)
       :: can_fault -> faults--; renew_lua(i, att[i], h_ok); rt[i] = 1; printf("@%d r%d renew reply LOST\n", tnow, i)
       :: can_fault && late[i] == L_NONE -> faults--; late[i] = L_RENEW; latt[i] = att[i]; rt[i] = 1; printf("@%d r%d renew request DELAYED\n", tnow, i)
       fi;
       assert(s_own == i + 1 && s_att == att[i] || same);            /* (d) */
       h_ok = false }
  od
}

/* replica i's task: runs, may write its result to the sink, returns; a
 * cancelled task may still write until it has stopped */
proctype Task(byte i) {
end:
  do
  :: atomic { !paused[i] && running(i) && !wrote[i] -> wrote[i] = true; sink_write(i) }
  :: atomic { !paused[i] && running(i) && wrote[i] && !cancelled[i] -> tk[i] = T_OK; printf("@%d r%d task ok\n", tnow, i) }
  :: atomic { !paused[i] && running(i) -> tk[i] = T_FAIL; printf("@%d r%d task failed/stopped\n", tnow, i) }
  od
}

/* faults of replica i: a pause (GC, SIGSTOP), or a crash that loses its
 * local state (the task dies with it: SPEC 8) */
#ifdef A_NOSTALL
#define can_pause(i) (!paused[i] && ph[i] != P_DOWN && !running(i))
#else
#define can_pause(i) (!paused[i] && ph[i] != P_DOWN)
#endif
#define PAUSE(i) :: atomic { can_fault && can_pause(i) -> faults--; paused[i] = true; printf("@%d r%d PAUSED\n", tnow, i) }; \
  :: atomic { paused[i] -> paused[i] = false; printf("@%d r%d resumes\n", tnow, i) }
#define CRASH(i) :: atomic { can_fault && ph[i] != P_DOWN && ph[i] != P_IDLE -> faults--; printf("@%d r%d CRASHED\n", tnow, i); \
     ph[i] = P_DOWN; paused[i] = false; wdon[i] = false; tk[i] = T_NONE; wt[i] = 0; \
     news[i] = NO_NEWS; handoff[i] = false; FORGET(i); \
     doubt[i] = false; asked[i] = false; ran[i] = cnt /* a new instance: no attempt so far is its own */ }; \
  :: atomic { ph[i] == P_DOWN && !closed -> ph[i] = P_CLAIM; printf("@%d r%d restarts\n", tnow, i) }
/* the late reply of a won claim reaches Hold (lease.go 50-72) */
#define REPLY(i) :: atomic { ph[i] == P_AWAIT && !paused[i] -> \
     ran[i] = att[i]; \
     if \
     :: vt[i] > 0 -> rt[i] = RENEW; wdon[i] = true; lost[i] = false; cancelled[i] = false; \
        wrote[i] = false; tk[i] = T_RUN; ph[i] = P_RUN \
     :: else -> lost[i] = true; ph[i] = P_RELEASE \
     fi }
/* a request given up on by its sender lands tnow, or never */
#define LAND(i) :: atomic { late[i] != L_NONE -> \
     snap; printf("@%d r%d's late request %d (attempt %d) lands or is dropped\n", tnow, i, late[i], latt[i]); \
     if \
     :: late[i] == L_CLAIM -> claim_lua(i, h_res, h_w, ldoubt[i]) \
     :: late[i] == L_RENEW -> renew_lua(i, latt[i], h_ok) \
     :: late[i] == L_COMPLETE -> complete_lua(i, latt[i], h_ok) \
     :: late[i] == L_RELEASE -> release_lua(i, latt[i]) \
     :: true -> skip \
     fi; \
     assert(late[i] == L_CLAIM || s_own == i + 1 && s_att == latt[i] || same); /* (d) */ \
     late[i] = L_NONE; latt[i] = 0; ldoubt[i] = 0; h_res = R_ERR; h_w = 0; h_ok = false }

/* the environment: faults, late replies, late requests */
active proctype Env() {
end:
  do
  PAUSE(0) PAUSE(1) PAUSE(2)
  CRASH(0) CRASH(1) CRASH(2)
  REPLY(0) REPLY(1) REPLY(2)
  LAND(0) LAND(1) LAND(2)
  od
}

/* the operator: slotd rerun TASK SLOT within the window (cli/status.go 257-330) */
active proctype Operator() {
end:
  do
  :: atomic { reruns > 0 && to_slot == 0 && !closed -> reruns--; printf("@%d operator: rerun\n", tnow); rerun_lua() }
  od
}

/* the clock: one tick when no running replica has a step due */
active proctype Clock() {
  byte i;
end:
  do
  :: atomic { !due(0) && !due(1) && !due(2) ->
       i = 0;
       do
       :: i < N ->
          if :: vt[i] > 0 -> vt[i]-- :: else fi;
          if :: rt[i] > 0 -> rt[i]-- :: else fi;
          if :: wt[i] > 0 -> wt[i]-- :: else fi;
          if :: tst[i] > 0 -> tst[i]-- :: else fi;
          i++
       :: else -> break
       od;
       i = 0; tnow++; printf("@%d tick\n", tnow);
       if
       :: key_run -> kttl--; if :: kttl == 0 -> kown = 0; katt = 0 :: else fi /* PX expiry */
       :: else
       fi;
       if :: knb > 0 -> knb-- :: else fi;                  /* the backoff's PX expiry */
       if
       :: to_slot > 0 -> to_slot--
       :: to_slot == 0 && !closed -> if :: closed = true; printf("@%d deadline\n", tnow) :: skip fi  /* the deadline, whenever it is */
       :: else
       fi }
  od
}

/* the safety invariants (a) and (c), checked in every state */
#ifdef NO_PROP_A
#undef inv_a1
#undef inv_a2
#define inv_a1 true   /* (a) not checked: a run without its assumptions */
#define inv_a2 true
#endif
active proctype Monitor() {
  atomic { !(inv_a1 && inv_a2 && inv_c) -> assert(inv_a1); assert(inv_a2); assert(inv_c) }
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N ->
       /* the fire time by the replica's clock: replica 0's clock may be a
        * tick ahead of the store's or behind it; the others' are right */
       if
       :: i == 0 -> if :: wt[i] = SLOT :: wt[i] = SLOT - 1 :: wt[i] = SLOT + 1 fi
       :: else -> wt[i] = SLOT
       fi;
       run Replica(i); run Watchdog(i); run Task(i);
       i++
    :: else -> break
    od;
    i = 0
  }
}
