package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// buildBinary builds ./cmd/gpufleet of the module that holds the working
// directory into dir and returns its path.
func buildBinary(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "gpufleet")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/gpufleet")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building gpufleet: %w\n%s", err, b)
	}
	return out, nil
}

// moduleRoot is the folder of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the module root: no go.mod above the working directory (run from the repository)")
		}
		dir = parent
	}
}

// server is the gpufleet process under test.
type server struct {
	cmd     *exec.Cmd
	dataDir string
	url     string
	admin   string // the admin token's secret
	logFile *os.File
	exited  chan struct{}
}

// startServer runs bin on a fresh data dir under dir, listening on a port
// of the loopback address the kernel picks. localAgent selects `up` with its
// agent; otherwise `server --no-local-agent`. storeDSN, when set, is the
// PostgreSQL store (GPUFLEET_STORE): the server then runs as a replica and
// is ready once it leads. It returns once the API is ready and the admin
// token is written.
func startServer(ctx context.Context, bin, dir string, localAgent bool, storeDSN string) (*server, error) {
	s := &server{dataDir: filepath.Join(dir, "data"), exited: make(chan struct{})}
	args := []string{"server", "--no-local-agent"}
	if localAgent {
		args = []string{"up"}
	}
	args = append(args, "--data-dir", s.dataDir, "--listen", "127.0.0.1:0",
		// Jobs' folders and checkpoints stay under the temp dir, even as root.
		"--work-root", filepath.Join(dir, "work"),
		"--shutdown-timeout", "10s", "--log-level", "info")
	lf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	s.logFile = lf
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	s.cmd.Env = serverEnv()
	if storeDSN != "" {
		s.cmd.Env = append(s.cmd.Env, "GPUFLEET_STORE="+storeDSN)
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := s.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := s.ready(ctx); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("waiting for the server to come up (log in %s): %w", lf.Name(), err)
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("the server exited at start: %s (log in %s)", s.cmd.ProcessState, lf.Name())
		case <-time.After(50 * time.Millisecond): // polling a child's readiness, bounded by the deadline
		}
	}
}

// serverEnv is the harness's environment without GPUFLEET_* settings, so a
// developer's own server or token never leaks into the run.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUFLEET_") {
			env = append(env, kv)
		}
	}
	return env
}

// ready reads the server's address and admin token from its data dir and
// checks /readyz.
func (s *server) ready(ctx context.Context) error {
	data, err := os.ReadFile(filepath.Join(s.dataDir, "server.json"))
	if err != nil {
		return err
	}
	var info struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(data, &info); err != nil || info.URL == "" {
		return fmt.Errorf("reading server.json: %q", data)
	}
	tok, err := os.ReadFile(filepath.Join(s.dataDir, "admin.token"))
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, info.URL+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	s.url, s.admin = info.URL, strings.TrimSpace(string(tok))
	return nil
}

// stop asks the server to shut down and kills it if it has not within 20 s.
func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	s.logFile.Close()
}

// procStats is what /proc says of a process.
type procStats struct {
	CPU     time.Duration // user + system
	SysCPU  time.Duration // system (the kernel's, for the process)
	PeakRSS int64         // VmHWM, bytes
	RSS     int64         // VmRSS, bytes
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// treeCPU is the CPU time (user + system) of process pid, of its children
// that exited and were waited for, and of its live children: for a
// PostgreSQL postmaster, every backend it forked, those gone included.
func treeCPU(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	total := ticks(f, 11, 12, 13, 14) // utime stime cutime cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	ppid := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		cf, err := statFields(child)
		if err != nil || cf[1] != ppid { // gone since, or not a child
			continue
		}
		total += ticks(cf, 11, 12, 13, 14)
	}
	return total * time.Second / clockTicks, nil
}

// statFields returns /proc/pid/stat's fields after the command name: index
// 0 is field 3 (state), 1 the parent's PID, 11 utime.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return nil, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	return f, nil
}

// ticks sums the fields at idx, in clock ticks.
func ticks(f []string, idx ...int) time.Duration {
	var n int64
	for _, i := range idx {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return time.Duration(n)
}

// readProc reads /proc/pid/stat and /proc/pid/status.
func readProc(pid int) (procStats, error) {
	var ps procStats
	f, err := statFields(pid)
	if err != nil {
		return ps, err
	}
	ps.CPU = ticks(f, 11, 12) * time.Second / clockTicks // fields 14, 15
	ps.SysCPU = ticks(f, 12) * time.Second / clockTicks

	st, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	defer st.Close()
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "VmHWM" {
			ps.PeakRSS = kb << 10
		} else {
			ps.RSS = kb << 10
		}
	}
	return ps, sc.Err()
}

// jobCounts scrapes the server's gpufleet_jobs gauge: jobs by state.
func jobCounts(ctx context.Context, hc *http.Client, url, token string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("/metrics answered %s", resp.Status)
	}
	return parseJobCounts(resp.Body)
}

// parseJobCounts reads `gpufleet_jobs{state="queued"} 12` lines of a
// Prometheus text exposition.
func parseJobCounts(r io.Reader) (map[string]int, error) {
	const prefix = `gpufleet_jobs{state="`
	counts := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		state, rest, ok := strings.Cut(line[len(prefix):], `"}`)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		counts[state] = int(v)
	}
	return counts, sc.Err()
}

// storeCommits is what the server's store-commit histograms say so far
// (gpufleet_store_commit_seconds and _batches).
type storeCommits struct {
	Commits, Batches, Seconds float64
}

// readStoreCommits scrapes the server's commit histograms' counts and sums.
func readStoreCommits(ctx context.Context, hc *http.Client, url, token string) (storeCommits, error) {
	var sc storeCommits
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return sc, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return sc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return sc, fmt.Errorf("/metrics answered %s", resp.Status)
	}
	series := map[string]*float64{
		"gpufleet_store_commit_seconds_count": &sc.Commits,
		"gpufleet_store_commit_seconds_sum":   &sc.Seconds,
		"gpufleet_store_commit_batches_sum":   &sc.Batches,
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		name, value, ok := strings.Cut(lines.Text(), " ")
		if p, want := series[name]; ok && want {
			if *p, err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
				return sc, fmt.Errorf("parsing %q: %w", lines.Text(), err)
			}
		}
	}
	return sc, lines.Err()
}
