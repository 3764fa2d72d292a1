package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/lock"
)

// The operator controls — trigger, pause, resume, reload — change what the
// fleet runs. trigger and reload ask a running daemon, through its HTTP
// API at the config's [http] listen address with its bearer token: a
// trigger must be heard by the replicas (the daemon that takes it writes
// it to the store, and every replica claims it), and a reload is the
// daemon's own. pause and resume write the store directly, as rerun does,
// so that they work while no daemon runs (a pause then holds from the
// fleet's start); with the embedded in-memory store, which lives inside
// the daemon, they go through its API like the others.

// cmdTrigger is `slotd trigger TASK`: run TASK now, once, fleet-wide.
func cmdTrigger(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var key string
	path, pos, ok := parseCommand("trigger", args, stderr, []string{"TASK"}, func(fs *flag.FlagSet) {
		fs.StringVar(&key, "key", "", "idempotency key: a repeated request with the same key starts no second run")
	})
	if !ok {
		return exitUsage
	}
	d, ok := loadReadOnly(path, discard, stderr)
	if !ok {
		return exitUsage
	}
	cfg := d.Config
	task, err := findTask(d, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "slotd trigger: %v\n", err)
		return exitUsage
	}
	// One key per command: a request the transport resends (it may, with
	// a key: the request is idempotent then) starts no second run.
	given := key != ""
	if !given {
		key = newActionKey()
	}
	hdr := []string{observe.IdempotencyHeader, key}
	body, code := callAPI(ctx, "trigger", cfg, "/api/v1/tasks/"+task.Name+"/trigger", stderr, hdr...)
	if code != exitOK {
		return code
	}
	var rep observe.TriggerReply
	if err := json.Unmarshal(body, &rep); err != nil {
		fmt.Fprintf(stderr, "slotd trigger: the daemon's answer: %v\n", err)
		return exitError
	}
	switch rep.Result {
	case lock.Repeated.String():
		if given {
			fmt.Fprintf(stdout, "already triggered with key %q: slot %s of %s; no new run\n", key, rep.Slot, rep.Task)
		} else {
			fmt.Fprintf(stdout, "this request was taken already: slot %s of %s; no new run\n", rep.Slot, rep.Task)
		}
	case lock.Coalesced.String():
		fmt.Fprintf(stdout, "%s was triggered in this second already: slot %s; no new run\n", rep.Task, rep.Slot)
	default:
		fmt.Fprintf(stdout, "triggered %s: slot %s, runs once on one replica (window until %s UTC)\n", rep.Task, rep.Slot, stamp(rep.Deadline))
	}
	return exitOK
}

// newActionKey is a fresh idempotency key for one trigger command.
func newActionKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand: never fails on Linux
	return "cli-" + hex.EncodeToString(b)
}

// cmdPause is `slotd pause TASK` and `slotd resume TASK`.
func cmdPause(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	path, pos, ok := parseCommand(name, args, stderr, []string{"TASK"}, nil)
	if !ok {
		return exitUsage
	}
	d, ok := loadReadOnly(path, discard, stderr)
	if !ok {
		return exitUsage
	}
	cfg := d.Config
	task, err := findTask(d, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "slotd %s: %v\n", name, err)
		return exitUsage
	}
	var paused bool
	if cfg.Embedded() {
		body, code := callAPI(ctx, name, cfg, "/api/v1/tasks/"+task.Name+"/"+name, stderr)
		if code != exitOK {
			return code
		}
		var rep observe.PauseReply
		if err := json.Unmarshal(body, &rep); err != nil {
			fmt.Fprintf(stderr, "slotd %s: the daemon's answer: %v\n", name, err)
			return exitError
		}
		paused = rep.Paused
	} else {
		quietRedis()
		b, err := store.Open(ctx, cfg, discard, store.WithMaxRetries(1))
		if err != nil {
			fmt.Fprintf(stderr, "slotd: %s: %v\n", path, err)
			return exitUsage
		}
		defer b.Close()
		ctl, ok := b.Store.(lock.Controls)
		if !ok {
			fmt.Fprintf(stderr, "slotd %s: the %s store keeps no operator controls\n", name, cfg.RedisMode())
			return exitError
		}
		op := lock.Pause
		if name == "resume" {
			op = lock.Resume
		}
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		if paused, err = ctl.SetPaused(ctx, task.Name, op); err != nil {
			fmt.Fprintf(stderr, "slotd %s: %v\n", name, err)
			return exitError
		}
	}
	if paused {
		fmt.Fprintf(stdout, "paused %s: no replica fires its slots until it is resumed; an attempt running now finishes\n", task.Name)
	} else {
		fmt.Fprintf(stdout, "resumed %s: its slots fire again from the next fire time\n", task.Name)
	}
	return exitOK
}

// cmdReload is `slotd reload`: the daemon re-reads its config. A file
// that is invalid here is not sent for: the daemon would refuse it too. One
// the daemon finds invalid (it reads its own -config, which may be another
// file) is its 422, whose error names the key and the task.
func cmdReload(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, _, ok := parseCommand("reload", args, stderr, nil, nil)
	if !ok {
		return exitUsage
	}
	d, err := assemble.Load(path, discard)
	if err != nil {
		fmt.Fprintf(stderr, "slotd reload: the daemon was not asked, it keeps its running config: %v\n", err)
		return exitUsage
	}
	cfg := d.Config
	if _, code := callAPI(ctx, "reload", cfg, "/api/v1/reload", stderr); code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "reloaded: the daemon at %s runs %s as it is now\n", cfg.Listen, cfg.Source)
	return exitOK
}

// callAPI POSTs to path on the daemon that cfg describes, with its bearer
// token and hdr (name, value pairs), and returns the answer's body. It
// says why on stderr and returns the exit code if the call fails.
func callAPI(ctx context.Context, name string, cfg *config.Config, path string, stderr io.Writer, hdr ...string) ([]byte, int) {
	// The token is read here, by the commands that send it, only.
	token, key, err := cfg.ReadToken()
	switch {
	case cfg.Listen == "off":
		fmt.Fprintf(stderr, "slotd %s: %s has [http] listen = \"off\": the daemon has no API to ask\n", name, cfg.Source)
		return nil, exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "slotd %s: %s: http.%s: %v\n", name, cfg.Source, key, err)
		return nil, exitUsage
	case token == "":
		fmt.Fprintf(stderr, "slotd %s: %s sets no [http] token_file or token_env: the daemon's write endpoints are disabled\n", name, cfg.Source)
		return nil, exitUsage
	}
	url := "http://" + dialAddr(cfg.Listen) + path
	client := http.DefaultClient
	if cfg.HTTPTLS != nil {
		url = "https://" + dialAddr(cfg.Listen) + path
		client = pinnedClient(cfg.HTTPTLS)
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "slotd %s: %v\n", name, err)
		return nil, exitUsage
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			fmt.Fprintf(stderr, "slotd %s: no daemon answers at %s (is it running with this config?): %v\n", name, cfg.Listen, op.Err)
		} else {
			fmt.Fprintf(stderr, "slotd %s: %v\n", name, err)
		}
		return nil, exitError
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "slotd %s: reading the daemon's answer: %v\n", name, err)
		return nil, exitError
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		fmt.Fprintf(stderr, "slotd %s: the daemon answered %s: %s\n", name, resp.Status, clean(msg))
		return nil, exitError
	}
	return bytes.TrimSpace(body), exitOK
}

// dialAddr is the address to reach a daemon listening on listen: an
// unspecified host (":9464", "0.0.0.0:9464") is reached on loopback.
// pinnedClient is the client of a daemon whose listener has TLS conf:
// the command reads the same file, so it trusts exactly the certificate
// the daemon serves (pinned, whatever its names or issuer: the daemon is
// reached at a loopback address its certificate may not name).
func pinnedClient(conf *tls.Config) *http.Client {
	want := conf.Certificates[0].Certificate[0]
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return errors.New("the daemon's certificate is not the one [http] tls_cert_file names")
			}
			return nil
		},
	}
	return &http.Client{Transport: t}
}

func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}
