package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// MinTokenLength is the shortest [http] bearer token accepted: the write
// endpoints it guards start and stop tasks.
const MinTokenLength = 16

// ErrTokenUnreadable is wrapped by ReadToken's error when the token's file
// could not be opened or read (missing, no permission) or its variable is
// unset: a problem of who asks, not of the token. Commands that only read
// the fleet never need the token (LoadReadOnly); validate reports this as
// a warning.
var ErrTokenUnreadable = errors.New("unreadable")

// readToken reads the [http] token keys and, unless readOnly, the bearer
// token of the write endpoints (trigger, pause, resume, reload) from
// token_file or token_env (ReadToken). Neither set: those endpoints are
// disabled. Errors never quote the token.
func (c *Config) readToken(t table, readOnly bool) {
	file, hasFile := t.str("token_file")
	env, hasEnv := t.str("token_env")
	switch {
	case hasFile && hasEnv:
		t.errorf("token_env", "set either token_file or token_env, not both")
		return
	case hasFile:
		c.TokenFile = file
	case hasEnv:
		if !envNameRE.MatchString(env) {
			t.errorf("token_env", "%q is not an environment variable name (want [A-Za-z_][A-Za-z0-9_]*)", env)
			return
		}
		c.TokenEnv = env
	default:
		return
	}
	if readOnly {
		return
	}
	token, key, err := c.ReadToken()
	if err != nil {
		t.errorf(key, "%v", err)
		return
	}
	c.Token = token
}

// ReadToken reads the bearer token from c.TokenFile or c.TokenEnv, and
// checks it: surrounding whitespace trimmed, at least MinTokenLength
// bytes, every byte one a client can send in an Authorization header
// (visible ASCII, no space); the file neither group- nor world-writable
// (anyone who can write it can set the daemon's next token), read as
// every file the configuration names (readFile). It returns "" and no
// error when neither is set, and the key that a problem concerns
// ("token_file" or "token_env"). The error never quotes the token.
func (c *Config) ReadToken() (token, key string, err error) {
	var where string
	switch {
	case c.TokenFile != "":
		key, where = "token_file", "file "+c.TokenFile
		b, mode, err := readFile(c.TokenFile, MaxNamedFileSize)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
				err = fmt.Errorf("%w: %w", ErrTokenUnreadable, err)
			}
			return "", key, err
		}
		if mode.Perm()&0o022 != 0 {
			return "", key, fmt.Errorf("%s is writable by its group or by anyone (mode %v): chmod go-w it", c.TokenFile, mode.Perm())
		}
		token = strings.TrimSpace(string(b))
	case c.TokenEnv != "":
		key, where = "token_env", "environment variable "+c.TokenEnv
		v, set := os.LookupEnv(c.TokenEnv)
		if !set {
			return "", key, fmt.Errorf("%w: environment variable %s is not set: it must hold a token of at least %d bytes", ErrTokenUnreadable, c.TokenEnv, MinTokenLength)
		}
		token = strings.TrimSpace(v)
	default:
		return "", "", nil
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", key, fmt.Errorf("the %s holds more than one line or word: want the token alone", where)
	}
	for i := range len(token) {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return "", key, fmt.Errorf("the token in %s holds byte %#02x at offset %d: want visible ASCII only, the bytes a client can send in an Authorization header", where, c, i)
		}
	}
	if len(token) < MinTokenLength {
		return "", key, fmt.Errorf("the token in %s is %d bytes (empty or unset?); want at least %d", where, len(token), MinTokenLength)
	}
	return token, key, nil
}
