package history

import (
	"encoding/json"
	"fmt"
	"strings"
)

// MaxJSON bounds an entry's stored JSON that etcd and ZooKeeper
// histories decode: slotd's own is at most about six times the output and
// error caps (JSON escapes "<" as six bytes); a larger value was written
// by someone else and is refused unread (the stores cap a value anyway:
// etcd's --max-request-bytes, ZooKeeper's jute.maxbuffer, both about 1 MiB).
const MaxJSON = 8 * (MaxOutput + MaxError)

// DecodeJSON decodes the JSON entry b stored at key, bounded as the
// Redis history's read script bounds one: a value over MaxJSON is not
// decoded, and reads as an entry whose Error says so; fields over their
// caps are cut, with CutMark first in Error. id is the entry's ID.
func DecodeJSON(b []byte, key, id string) Entry {
	if len(b) > MaxJSON {
		return Entry{ID: id, Error: CutMark(key, id,
			fmt.Sprintf("%d bytes, over the cap of %d: not read", len(b), MaxJSON))}
	}
	var e Entry
	// An entry that does not parse is left zero but for its id: one odd
	// entry should not hide the others.
	_ = json.Unmarshal(b, &e)
	e.ID = id
	var cut []string
	outcome := string(e.Outcome)
	for _, f := range []struct {
		name string
		v    *string
	}{{"slot", &e.Slot}, {"replica", &e.Replica}, {"outcome", &outcome}} {
		if len(*f.v) > MaxError {
			cut = append(cut, fmt.Sprintf("%s of %d bytes", f.name, len(*f.v)))
			*f.v = strings.ToValidUTF8((*f.v)[:MaxError], "\uFFFD")
		}
	}
	e.Outcome = Outcome(outcome)
	if len(e.Error) > MaxError {
		cut = append(cut, fmt.Sprintf("error of %d bytes", len(e.Error)))
	}
	if len(e.Output) > MaxOutput {
		cut = append(cut, fmt.Sprintf("output of %d bytes", len(e.Output)))
	}
	if len(cut) > 0 {
		e.Error = CutMark(key, id, strings.Join(cut, ", ")) + e.Error
	}
	e.Error = TruncateError(e.Error)
	e.Output = TruncateOutput(e.Output)
	return e
}
