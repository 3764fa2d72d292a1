package config

import (
	"strings"
	"testing"
)

// [redis] url_env takes the Redis URL from the environment, so that its
// password can live in a Secret or an EnvironmentFile.
func TestRedisURLEnv(t *testing.T) {
	t.Setenv("SLOTD_TEST_REDIS_URL", "redis://:s3cret@redis.example:6379/2")
	cfg := parse(t, "[redis]\nurl_env = \"SLOTD_TEST_REDIS_URL\"\n"+minimal)
	if cfg.RedisURL != "redis://:s3cret@redis.example:6379/2" {
		t.Errorf("RedisURL = %q, want the variable's value", cfg.RedisURL)
	}
}

func TestRedisURLEnvErrors(t *testing.T) {
	t.Setenv("SLOTD_TEST_EMPTY", "")
	t.Setenv("SLOTD_TEST_BAD", "http://:s3cret@host/0")
	t.Setenv("SLOTD_TEST_BAD_PORT", "redis://:s3cret@host:notaport/0")
	t.Setenv("SLOTD_TEST_OK", "redis://127.0.0.1:6379/0")
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"unset", `url_env = "SLOTD_TEST_UNSET_VARIABLE"`, []string{"redis.url_env", "SLOTD_TEST_UNSET_VARIABLE is not set"}},
		{"empty", `url_env = "SLOTD_TEST_EMPTY"`, []string{"redis.url_env", "SLOTD_TEST_EMPTY is empty"}},
		{"bad scheme", `url_env = "SLOTD_TEST_BAD"`, []string{"redis.url_env", "SLOTD_TEST_BAD", "invalid Redis URL"}},
		{"bad port", `url_env = "SLOTD_TEST_BAD_PORT"`, []string{"redis.url_env", "SLOTD_TEST_BAD_PORT", "invalid Redis URL"}},
		{"bad name", `url_env = "NOT-A-NAME"`, []string{"redis.url_env", `"NOT-A-NAME" is not an environment variable name`}},
		{"not a string", `url_env = 5`, []string{"redis.url_env", "must be a string"}},
		{"both", "url = \"redis://127.0.0.1:6379/0\"\nurl_env = \"SLOTD_TEST_OK\"", []string{"redis.url_env", "either url or url_env"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("[redis]\n"+tc.src+"\n"+minimal), "test.toml", nil, testPlugins)
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q quotes the password", err)
			}
		})
	}
}

// [daemon] env_drop lists variables exec tasks must not inherit; url_env's
// variable is recorded so the daemon drops it too.
func TestEnvDrop(t *testing.T) {
	t.Setenv("SLOTD_TEST_REDIS_URL", "redis://:s3cret@127.0.0.1:6379/2")
	cfg := parse(t, "[daemon]\nenv_drop = [\"API_TOKEN\", \"AWS_SECRET_ACCESS_KEY\"]\n[redis]\nurl_env = \"SLOTD_TEST_REDIS_URL\"\n"+minimal)
	if got := strings.Join(cfg.EnvDrop, ","); got != "API_TOKEN,AWS_SECRET_ACCESS_KEY" {
		t.Errorf("EnvDrop = %q", got)
	}
	if cfg.URLEnv != "SLOTD_TEST_REDIS_URL" {
		t.Errorf("URLEnv = %q, want the variable's name", cfg.URLEnv)
	}
	for _, tc := range []struct{ src, want string }{
		{`env_drop = "API_TOKEN"`, "must be an array"},
		{`env_drop = ["OK", "NOT-A-NAME"]`, `item 2 (NOT-A-NAME) is not an environment variable name`},
		{`env_drop = [5]`, `item 1 (5) is not an environment variable name`},
	} {
		_, err := Parse([]byte("[daemon]\n"+tc.src+"\n"+minimal), "test.toml", nil, testPlugins)
		if err == nil || !strings.Contains(err.Error(), "daemon.env_drop") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want daemon.env_drop and %q", tc.src, err, tc.want)
		}
	}
}
