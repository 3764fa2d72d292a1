// Package schedule is slotd's cron math: it parses a task's schedule (a
// robfig/cron/v3 spec or "@every D") in an IANA time zone, and says when the
// task fires and how each slot is named.
//
// Guarantees, for every Schedule returned by Parse:
//   - fire times are strictly increasing, in UTC, whole seconds, and depend
//     only on the spec and the zone: every replica, whenever it started and
//     whatever its host's time zone database, computes the same ones
//     (time/tzdata is embedded);
//   - changes of UTC offset (DST) follow one documented policy (see
//     Schedule): by elapsed time when the hour field is "*", the classic
//     cron policy otherwise;
//   - "@every D" fires at the multiples of D since the Unix epoch;
//   - slot ids (SlotID) are the fire time in UTC at the schedule's
//     Resolution, which is the coarsest at which consecutive fire times get
//     distinct ids, so two fires never share an id;
//   - MaxGap, the default slot window, is the longest gap between
//     consecutive fire times, including across changes of UTC offset.
//
// Beyond robfig/cron: Quartz's L, W and # in the day fields, Jenkins' H in
// any field (hashed with the task's name, so replicas agree and tasks on
// one spec spread), and Combine: the union of several specs within
// active bounds, its slot ids still distinct for consecutive fires.
//
// It imports nothing of slotd's and nothing beyond robfig/cron and the
// standard library.
package schedule
