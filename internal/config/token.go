package config

import (
	"os"
	"strings"
)

// MinTokenLength is the shortest [http] bearer token accepted: the write
// endpoints it guards start and stop tasks.
const MinTokenLength = 16

// readToken reads the bearer token of the write endpoints (trigger,
// pause, resume, reload) from [http] token_file or token_env, at load.
// Neither set: those endpoints are disabled. Errors never quote the token.
func (c *Config) readToken(t table) {
	file, hasFile := t.str("token_file")
	env, hasEnv := t.str("token_env")
	switch {
	case hasFile && hasEnv:
		t.errorf("token_env", "set either token_file or token_env, not both")
		return
	case hasFile:
		b, _, err := readFile(file, MaxNamedFileSize)
		if err != nil {
			t.errorf("token_file", "%v", err)
			return
		}
		c.Token, c.TokenFile = strings.TrimSpace(string(b)), file
		if strings.ContainsAny(c.Token, " \t\r\n") {
			c.Token = ""
			t.errorf("token_file", "%s holds more than one line or word: want the token alone", file)
			return
		}
	case hasEnv:
		if !envNameRE.MatchString(env) {
			t.errorf("token_env", "%q is not an environment variable name (want [A-Za-z_][A-Za-z0-9_]*)", env)
			return
		}
		c.Token, c.TokenEnv = strings.TrimSpace(os.Getenv(env)), env
	default:
		return
	}
	if len(c.Token) < MinTokenLength {
		key, where := "token_file", "file "+file
		if hasEnv {
			key, where = "token_env", "environment variable "+env
		}
		t.errorf(key, "the token in %s is %d bytes (empty or unset?); want at least %d", where, len(c.Token), MinTokenLength)
		c.Token = ""
	}
}
