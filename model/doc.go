// Package model holds slotd's checked model of the slot protocol:
// slot.pml, a Promela model of lock/*.lua, the lease watchdog and the
// scheduler's slot runs, checked by spin through the script check, which
// also verifies that every deliberately broken variant (mutant) and every
// dropped assumption yields a counterexample. Its tests run that script
// and fail when a Lua script the model mirrors changed without the model
// being reviewed (scripts.sha256). See docs/model.md.
//
// The package has no Go API; it exists for its tests.
package model
