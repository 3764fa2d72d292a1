package config

import "fmt"

// Bounds on a configuration file, checked before it is decoded. The TOML
// decoder keeps every key's full path, so its cost grows with the square of
// the nesting: a 40 KB file of 20,000 nested keys took 24 s and 5 GB to
// reject. A real configuration is a few kilobytes, four levels deep
// (task.params.env.NAME).
const (
	// MaxFileSize is the largest configuration file read, in bytes
	// (16 MiB). Only a regular file is read (readFile), and reading stops
	// one byte past the limit.
	MaxFileSize = 16 << 20
	// MaxDepth is the deepest nesting of keys, tables and arrays: `a = 1`
	// is depth 1, `[t]` then `a.b = [1]` puts the 1 at depth 4.
	MaxDepth = 16
	// MaxKeys is the most keys a file may hold, counting every part of
	// each key = value pair's key and each [table] or [[array]] header's
	// (a.b.c = 1 is three keys: it defines the tables a and a.b too, and
	// the decoder's cost grows with each part), and each array and inline
	// table in a value.
	MaxKeys = 500_000
)

// errTooLarge is returned by readFile for a configuration file past
// MaxFileSize.
var errTooLarge = fmt.Errorf("larger than %d bytes (16 MiB), the limit for a configuration file", MaxFileSize)

// checkBounds scans TOML source in one linear pass and returns an error if
// it nests deeper than MaxDepth or holds more than MaxKeys keys, or is
// larger than MaxFileSize. It understands just enough TOML to tell keys
// from values (comments, the four kinds of strings, headers, dotted keys,
// arrays and inline tables); it never counts a valid file's depth low, so a
// file it passes cannot make the decoder's cost blow up. Malformed TOML is
// left to the decoder to report.
func checkBounds(data []byte) error {
	if len(data) > MaxFileSize {
		return errTooLarge
	}
	s := boundsScanner{data: data, line: 1, atKey: true}
	return s.scan()
}

// frame is an open array ('[') or inline table ('{') in a value. level is
// the depth of what sits directly in it: an array's elements, or the base
// that an inline table's keys add their segments to.
type frame struct {
	kind  byte
	level int
}

type boundsScanner struct {
	data   []byte
	i      int
	line   int
	keys   int
	header int     // depth of the current [table] header
	stack  []frame // open arrays and inline tables
	atKey  bool    // a key may start here
	inKey  bool    // reading a key: segs counts its segments
	segs   int
	keyPos int // where the key being read starts, for errors
	value  int // depth of the value being read
}

func (s *boundsScanner) scan() error {
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\n':
			s.line++
			s.i++
			if len(s.stack) == 0 {
				s.atKey, s.inKey = true, false
			}
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
		case c == '#':
			for s.i < len(s.data) && s.data[s.i] != '\n' {
				s.i++
			}
		case c == '"' || c == '\'':
			if s.atKey {
				s.startKey()
			}
			s.skipString()
		case s.atKey:
			if err := s.keyByte(c); err != nil {
				return err
			}
		default:
			if err := s.valueByte(c); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *boundsScanner) startKey() {
	if !s.inKey {
		s.inKey, s.segs, s.keyPos = true, 1, s.i
	}
}

// keyByte handles c where a key is expected or being read.
func (s *boundsScanner) keyByte(c byte) error {
	switch {
	case c == '[' && !s.inKey && len(s.stack) == 0:
		return s.tableHeader()
	case c == '.':
		s.startKey()
		s.segs++
		s.i++
	case c == '=':
		s.i++
		if err := s.countKeys(s.segs); err != nil {
			return err
		}
		base := s.header
		if n := len(s.stack); n > 0 {
			base = s.stack[n-1].level
		}
		s.value = base + s.segs
		s.atKey, s.inKey = false, false
		return s.deep(s.value, s.keyPos)
	case c == '}' && len(s.stack) > 0 && s.stack[len(s.stack)-1].kind == '{':
		// An empty inline table: {}.
		s.atKey, s.inKey = false, false
		return s.valueByte(c)
	default:
		s.startKey()
		s.i++
	}
	return nil
}

// valueByte handles c inside a value.
func (s *boundsScanner) valueByte(c byte) error {
	s.i++
	top := byte(0)
	if n := len(s.stack); n > 0 {
		top = s.stack[n-1].kind
	}
	switch {
	case c == '[':
		s.value++
		s.stack = append(s.stack, frame{'[', s.value})
		if err := s.countKeys(1); err != nil {
			return err
		}
		return s.deep(s.value, s.i-1)
	case c == '{':
		s.stack = append(s.stack, frame{'{', s.value})
		s.atKey, s.inKey = true, false
		return s.countKeys(1)
	case c == ',' && top == '{':
		s.atKey, s.inKey = true, false
	case c == ',' && top == '[':
		s.value = s.stack[len(s.stack)-1].level
	case (c == ']' && top == '[') || (c == '}' && top == '{'):
		s.stack = s.stack[:len(s.stack)-1]
		if n := len(s.stack); n > 0 && s.stack[n-1].kind == '[' {
			s.value = s.stack[n-1].level
		}
	}
	return nil
}

// tableHeader reads a [table] or [[array of tables]] header.
func (s *boundsScanner) tableHeader() error {
	start := s.i
	s.i++
	if s.i < len(s.data) && s.data[s.i] == '[' {
		s.i++
	}
	segs := 1
	for s.i < len(s.data) {
		c := s.data[s.i]
		if c == '"' || c == '\'' {
			s.skipString()
			continue
		}
		if c == ']' || c == '\n' {
			break
		}
		if c == '.' {
			segs++
		}
		s.i++
	}
	for s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
	}
	s.header = segs
	s.atKey = false // the rest of the line is a comment or an error
	if err := s.countKeys(segs); err != nil {
		return err
	}
	return s.deep(segs, start)
}

func (s *boundsScanner) countKeys(n int) error {
	s.keys += n
	if s.keys > MaxKeys {
		return fmt.Errorf("line %d: more than %d keys, the limit for a configuration file", s.line, MaxKeys)
	}
	return nil
}

// deep reports depth d past MaxDepth, quoting the start of the line's key
// (from pos) so that the operator can find it.
func (s *boundsScanner) deep(d, pos int) error {
	if d <= MaxDepth {
		return nil
	}
	end := pos
	for end < len(s.data) && end-pos < 40 && s.data[end] != '\n' && s.data[end] != '=' {
		end++
	}
	return fmt.Errorf("line %d: nested deeper than %d levels (at %q...), the limit for a configuration file", s.line, MaxDepth, s.data[pos:end])
}

// skipString skips a basic ("..."), literal ('...') or multi-line
// (three quotes of either kind) string starting at s.i.
func (s *boundsScanner) skipString() {
	q := s.data[s.i]
	if s.i+2 < len(s.data) && s.data[s.i+1] == q && s.data[s.i+2] == q {
		s.i += 3
		for s.i < len(s.data) {
			c := s.data[s.i]
			switch {
			case c == '\\' && q == '"':
				if s.i+1 < len(s.data) && s.data[s.i+1] == '\n' {
					s.line++
				}
				s.i += 2
				continue
			case c == '\n':
				s.line++
			case c == q && s.i+2 < len(s.data) && s.data[s.i+1] == q && s.data[s.i+2] == q:
				s.i += 3
				// Up to two more quotes belong to the string's content.
				for k := 0; k < 2 && s.i < len(s.data) && s.data[s.i] == q; k++ {
					s.i++
				}
				return
			}
			s.i++
		}
		return
	}
	s.i++
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '\\' && q == '"':
			s.i += 2
			continue
		case c == '\n':
			return // unterminated: the decoder says so
		case c == q:
			s.i++
			return
		}
		s.i++
	}
}
