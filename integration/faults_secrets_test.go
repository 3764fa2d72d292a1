package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The daemon's own secrets stay the daemon's: the variable [redis] url_env
// names (the Redis URL with its password) and every variable [daemon]
// env_drop lists are absent from an exec task's environment, while the
// rest of the daemon's environment still reaches it.
func TestExecTasksDoNotInheritDaemonSecrets(t *testing.T) {
	c := newCluster(t)
	t.Setenv("SLOTD_IT_REDIS_URL", c.srv.URL())
	t.Setenv("SLOTD_IT_API_TOKEN", "s3cret-token")
	t.Setenv("SLOTD_IT_KEPT", "kept")
	envFile := c.ledger.path + ".env"
	cfg := config("r1", c.srv.URL(), "5s", "", c.execTask("env", "* * * * * *", `env > "$LEDGER.env.tmp" && mv "$LEDGER.env.tmp" "$LEDGER.env"`, ""))
	cfg = strings.Replace(cfg, "url = "+q(c.srv.URL()), `url_env = "SLOTD_IT_REDIS_URL"`, 1)
	cfg = strings.Replace(cfg, "[daemon]\n", "[daemon]\nenv_drop = [\"SLOTD_IT_API_TOKEN\"]\n", 1)
	c.reps = append(c.reps, startReplica(t, "r1", cfg))
	env := awaitPoll(t, "the task's environment", 15*time.Second,
		func() string { b, _ := os.ReadFile(envFile); return string(b) },
		func(s string) bool { return s != "" },
		func(s string) string { return "no env file yet" })
	for _, gone := range []string{"SLOTD_IT_REDIS_URL=", "SLOTD_IT_API_TOKEN="} {
		if strings.Contains(env, gone) {
			t.Errorf("the task inherited %s...; the daemon must drop it", gone)
		}
	}
	if !strings.Contains(env, "SLOTD_IT_KEPT=kept") {
		t.Errorf("the task lost SLOTD_IT_KEPT, which no setting drops:\n%s", env)
	}
	if strings.Contains(env, "s3cret") {
		t.Errorf("a secret reached the task's environment:\n%s", env)
	}
	c.stopAll()
}
