package config

import (
	"strings"
	"testing"
	"time"
)

// [plugins.http] sizes the http plugin's shared connection pool; unset,
// the pool is DefaultHTTPPool. Bad values are load errors naming the
// key.
func TestHTTPPoolConfig(t *testing.T) {
	cfg, err := Parse([]byte(minimal), "test.toml", nil, testPlugins)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPPool != DefaultHTTPPool {
		t.Errorf("default pool %+v, want %+v", cfg.HTTPPool, DefaultHTTPPool)
	}
	cfg, err = Parse([]byte("[plugins.http]\nmax_idle_per_host = 1000\nidle_timeout = \"5m\"\nmax_conns_per_host = 512\n"+minimal), "test.toml", nil, testPlugins)
	if err != nil {
		t.Fatal(err)
	}
	if want := (HTTPPool{MaxIdlePerHost: 1000, IdleTimeout: 5 * time.Minute, MaxConnsPerHost: 512}); cfg.HTTPPool != want {
		t.Errorf("pool %+v, want %+v", cfg.HTTPPool, want)
	}
	// Unset, the bound on connections follows the idle pool; 0 lifts it.
	for src, want := range map[string]int{"max_idle_per_host = 64\n": 64, "max_idle_per_host = 64\nmax_conns_per_host = 0\n": 0} {
		cfg, err = Parse([]byte("[plugins.http]\n"+src+minimal), "test.toml", nil, testPlugins)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTPPool.MaxConnsPerHost != want {
			t.Errorf("%q: max_conns_per_host %d, want %d", src, cfg.HTTPPool.MaxConnsPerHost, want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"[plugins.http]\nmax_idle_per_host = 0\n", "plugins.http.max_idle_per_host: 0 is out of range: want 1 to 10000"},
		{"[plugins.http]\nmax_idle_per_host = 10001\n", "plugins.http.max_idle_per_host: 10001 is out of range"},
		{"[plugins.http]\nmax_idle_per_host = \"64\"\n", "plugins.http.max_idle_per_host: must be an integer"},
		{"[plugins.http]\nidle_timeout = \"0s\"\n", "plugins.http.idle_timeout: 0s: must be positive"},
		{"[plugins.http]\nidle_timeout = 90\n", "plugins.http.idle_timeout: must be a duration string"},
		{"[plugins.http]\nmax_conns_per_host = -1\n", "plugins.http.max_conns_per_host: -1 is out of range: want 0 to 10000"},
		{"[plugins.http]\nmax_idle = 5\n", `unknown key "plugins.http.max_idle"`},
		{"[plugins.exec]\n", `unknown key "plugins.exec"`},
		{"plugins = 1\n", "plugins: must be a table ([plugins])"},
		{"[plugins]\nhttp = 1\n", "plugins.http: must be a table ([plugins.http])"},
	} {
		_, err := Parse([]byte(tc.src+minimal), "test.toml", nil, testPlugins)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

// output_tail bounds the output each attempt's history entry keeps:
// 4 KiB by default, set in [defaults] or per task, 0 to 64 KiB.
func TestOutputTailConfig(t *testing.T) {
	two := minimal + "\n[[task]]\nname = \"quiet\"\nschedule = \"@hourly\"\nplugin = \"config-test-noop\"\noutput_tail = 0\n"
	for _, tc := range []struct {
		src           string
		report, quiet int
	}{
		{two, DefaultOutputTail, 0},
		{"[defaults]\noutput_tail = 65536\n" + two, 65536, 0},
		{"[defaults]\noutput_tail = 100\n" + two, 100, 0},
	} {
		cfg := parse(t, tc.src)
		if cfg.Tasks[0].OutputTail != tc.report || cfg.Tasks[1].OutputTail != tc.quiet {
			t.Errorf("%q: output_tail %d and %d, want %d and %d", tc.src, cfg.Tasks[0].OutputTail, cfg.Tasks[1].OutputTail, tc.report, tc.quiet)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"[defaults]\noutput_tail = 65537\n" + minimal, "defaults.output_tail: 65537 is out of range: want 0 to 65536"},
		{"[defaults]\noutput_tail = -1\n" + minimal, "defaults.output_tail: -1 is out of range"},
		{minimal + "output_tail = \"4KiB\"\n", `task "report" (task #1): output_tail: must be an integer`},
	} {
		_, err := Parse([]byte(tc.src), "test.toml", nil, testPlugins)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
