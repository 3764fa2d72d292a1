package kv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// countingStore is a Store in memory that counts the entries it reads:
// one per Get, one per entry a List returns.
type countingStore struct {
	dirs    map[string]map[string]Entry
	version int64
	read    int
}

func (s *countingStore) Get(_ context.Context, dir, name string) (Entry, error) {
	s.read++
	return s.dirs[dir][name], nil
}

func (s *countingStore) List(_ context.Context, dir string) (map[string]Entry, error) {
	out := map[string]Entry{}
	for n, e := range s.dirs[dir] {
		out[n] = e
	}
	s.read += len(out)
	return out, nil
}

func (s *countingStore) Put(_ context.Context, dir, name, value string, version int64, _ time.Duration) (bool, error) {
	if s.dirs[dir][name].Version != version {
		return false, nil
	}
	if s.dirs[dir] == nil {
		s.dirs[dir] = map[string]Entry{}
	}
	s.version++
	s.dirs[dir][name] = Entry{Value: value, Version: s.version}
	return true, nil
}

func (s *countingStore) Delete(_ context.Context, dir, name string, version int64) (bool, error) {
	if e, ok := s.dirs[dir][name]; !ok || e.Version != version {
		return false, nil
	}
	delete(s.dirs[dir], name)
	return true, nil
}

func (s *countingStore) OnMembers(string, func()) func()        { return func() {} }
func (s *countingStore) OnChange(string, string, func()) func() { return func() {} }

// A notice's read of one task's pause state and triggers reads that
// task's entries, not those of every configured task; a read of many
// tasks lists the directories, and answers the same.
func TestReadOfOneTaskReadsItsEntries(t *testing.T) {
	const n = 10000
	s := &countingStore{dirs: map[string]map[string]Entry{}}
	ctx := context.Background()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
		value := "resumed"
		if i%2 == 1 {
			value = "paused"
		}
		for _, dir := range []string{pausedDir, configDir} {
			if ok, _ := s.Put(ctx, dir, names[i], value, 0, time.Hour); !ok {
				t.Fatal("put refused")
			}
		}
	}
	c := NewControls(s, func(context.Context) (time.Time, error) { return time.Now(), nil }, nil)
	s.read = 0
	one, err := c.Paused(ctx, names[7:8], true)
	if err != nil || len(one) != 1 || !one[0] {
		t.Fatalf("pause state of %s: %v, %v; want paused", names[7], one, err)
	}
	if _, err := c.Triggers(ctx, names[7:8]); err != nil {
		t.Fatal(err)
	}
	if s.read > 3 {
		t.Errorf("one task's pause state and triggers read %d entries of %d tasks; want 3 (its state, config value and triggers)", s.read, n)
	}
	all, err := c.Paused(ctx, names, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range all {
		if p != (i%2 == 1) {
			t.Fatalf("%s: paused %v read with the others, want %v", names[i], p, i%2 == 1)
		}
	}
}
