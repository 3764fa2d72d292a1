package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// replica is one child process running the daemon.
type replica struct {
	id      string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returned
	waitErr error
	listen  string
	records string
	killed  bool
	final   procStats // read just before the child was stopped or killed
}

// cpu is the replica's CPU seconds so far (0 if /proc cannot say): utime +
// stime of every thread, at USER_HZ resolution (10 ms).
func (r *replica) cpu() float64 {
	s, _ := readProc(r.cmd.Process.Pid)
	return s.CPUSeconds
}

// procStats is what /proc says about a process.
type procStats struct {
	CPUSeconds float64 `json:"cpu_s"`   // utime + stime
	PeakRSSMB  float64 `json:"peak_mb"` // VmHWM
	RSSMB      float64 `json:"rss_mb"`  // VmRSS
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func readProc(pid int) (procStats, error) {
	var s procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	s.CPUSeconds = (ut + st) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmHWM":
			s.PeakRSSMB = kb / 1024
		case "VmRSS":
			s.RSSMB = kb / 1024
		}
	}
	return s, nil
}

// startReplica re-executes this binary as a child running the daemon on
// config, writing its records under dir.
func startReplica(id, dir, config, listen string, profile, noteClaims bool) (*replica, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r := &replica{id: id, listen: listen, records: filepath.Join(dir, id+".records"), exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r.cmd = exec.Command(self, "-child", "-config", config, "-records", r.records, "-profile="+strconv.FormatBool(profile),
		"-note-claims="+strconv.FormatBool(noteClaims))
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	// A replica must not outlive the tool.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start replica %s: %w", id, err)
	}
	go func() {
		r.waitErr = r.cmd.Wait()
		close(r.exited)
	}()
	return r, nil
}

// awaitReady polls the replica's /readyz until it answers 200.
func (r *replica) awaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-r.exited:
			return fmt.Errorf("replica %s exited before it was ready: %v (see %s.log)", r.id, r.waitErr, r.id)
		default:
		}
		resp, err := client.Get("http://" + r.listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not ready within %v: %v", r.id, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill stops the replica with SIGKILL, as a crash would.
func (r *replica) kill() {
	if s, err := readProc(r.cmd.Process.Pid); err == nil {
		r.final = s
	}
	r.killed = true
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// stop reads the replica's final /proc figures, then stops it with SIGTERM
// (SIGKILL after grace) and waits for it.
func (r *replica) stop(grace time.Duration) error {
	select {
	case <-r.exited:
		return nil
	default:
	}
	if s, err := readProc(r.cmd.Process.Pid); err == nil {
		r.final = s
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		if r.waitErr != nil {
			return fmt.Errorf("replica %s: %w (see %s.log)", r.id, r.waitErr, r.id)
		}
		return nil
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return fmt.Errorf("replica %s did not stop within %v of SIGTERM", r.id, grace)
	}
}
