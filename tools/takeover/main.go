// Command takeover measures how long a standby replica of the gpufleet
// control plane takes to lead after the leader dies (issue 18): the time
// from a SIGKILL of the leader to the end of the first scheduling pass of
// the replica that takes over, as that replica logs it ("first scheduling
// pass done"), and to its /readyz answering 200.
//
// It starts --replicas `gpufleet server --no-local-agent` processes on one
// PostgreSQL database (--store, or env GPUFLEET_TAKEOVER_STORE: an empty
// database), submits --jobs queued jobs (the state a new leader takes
// over), then --runs times: kills the leader with SIGKILL, waits for the
// next one, records the times, and starts the killed replica again as a
// follower. It prints each run and the p50 and max.
//
//	go build -o /tmp/gpufleet ./cmd/gpufleet
//	go run ./tools/takeover --binary /tmp/gpufleet --store postgres://… --runs 10
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/api/client"
)

func main() {
	var (
		bin, dsn           string
		replicas, runs, nj int
	)
	flag.StringVar(&bin, "binary", "", "the gpufleet binary (required)")
	flag.StringVar(&dsn, "store", os.Getenv("GPUFLEET_TAKEOVER_STORE"), "postgres:// DSN of an empty database (env GPUFLEET_TAKEOVER_STORE)")
	flag.IntVar(&replicas, "replicas", 3, "server replicas")
	flag.IntVar(&runs, "runs", 10, "takeovers to measure")
	flag.IntVar(&nj, "jobs", 2000, "queued jobs submitted first: the state a new leader takes over")
	flag.Parse()
	if bin == "" || dsn == "" {
		fmt.Fprintln(os.Stderr, "takeover: --binary and --store are required (see go doc ./tools/takeover)")
		os.Exit(2)
	}
	if err := run(bin, dsn, replicas, runs, nj); err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		os.Exit(1)
	}
}

// replica is one server process.
type replica struct {
	id, dir, url, listen string
	cmd                  *exec.Cmd
	log                  *os.File
}

func run(bin, dsn string, n, runs, nj int) error {
	root, err := os.MkdirTemp("", "gpufleet-takeover")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// Workload users must pass through to the work root below it.
	if err := os.Chmod(root, 0o711); err != nil {
		return err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	env := append(cleanEnv(), "GPUFLEET_STORE="+dsn, "GPUFLEET_SECRET_KEYS="+hex.EncodeToString(key))
	rs := make([]*replica, n)
	for i := range rs {
		port, err := freePort()
		if err != nil {
			return err
		}
		rs[i] = &replica{id: fmt.Sprintf("r%d", i+1), dir: filepath.Join(root, fmt.Sprintf("r%d", i+1)), listen: port, url: "http://" + port}
		if err := rs[i].start(bin, env, root); err != nil {
			return err
		}
	}
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	lead, err := waitLeader(rs, nil, 2*time.Minute)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(root, "r1.log"))
		return fmt.Errorf("%w; r1's log:\n%s", err, b)
	}
	tok, err := os.ReadFile(filepath.Join(lead.dir, "admin.token"))
	if err != nil {
		return err
	}
	var urls []string
	for _, r := range rs {
		urls = append(urls, r.url)
	}
	if err := seed(client.New(strings.Join(urls, ","), strings.TrimSpace(string(tok)), nil), nj); err != nil {
		return err
	}
	fmt.Printf("%d replicas, %d queued jobs; killing the leader %d times\n", n, nj, runs)
	fmt.Println("run  killed  new leader  kill→first pass  kill→/readyz 200  tail changes")
	var toPass, toReady []time.Duration
	for i := range runs {
		time.Sleep(2 * time.Second) // let followers settle
		killed := time.Now()
		if err := lead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		_ = lead.cmd.Wait()
		next, err := waitLeader(rs, lead, 30*time.Second)
		if err != nil {
			return err
		}
		ready := time.Since(killed)
		passAt, tail, err := firstPass(next, killed, 30*time.Second)
		if err != nil {
			return err
		}
		toPass, toReady = append(toPass, passAt.Sub(killed)), append(toReady, ready)
		fmt.Printf("%3d  %6s  %10s  %15s  %16s  %s\n", i+1, lead.id, next.id, passAt.Sub(killed).Round(time.Millisecond), ready.Round(time.Millisecond), tail)
		if err := lead.start(bin, env, root); err != nil {
			return err
		}
		lead = next
	}
	fmt.Printf("kill → first pass: p50 %s, max %s; kill → /readyz: p50 %s, max %s\n",
		pct(toPass, 0.5), pct(toPass, 1), pct(toReady, 0.5), pct(toReady, 1))
	return nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i].Round(time.Millisecond)
}

// seed submits nj jobs no node can run (they stay queued).
func seed(c *client.Client, nj int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	next := make(chan int)
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				m := fmt.Sprintf(`{"apiVersion":"gpufleet.dev/v1","kind":"Job","metadata":{"name":"q-%d"},"spec":{"resources":{"gpus":8},"run":{"command":["true"]}}}`, i)
				if _, err := c.SubmitJob(ctx, []byte(m), client.SubmitOptions{IdempotencyKey: fmt.Sprintf("seed-%d", i)}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	var err error
	for i := 0; i < nj && err == nil; i++ {
		select {
		case next <- i:
		case err = <-errc:
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errc) > 0 {
		err = <-errc
	}
	return err
}

func (r *replica) start(bin string, env []string, root string) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(root, r.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.log = f
	r.cmd = exec.Command(bin, "server", "--no-local-agent", "--data-dir", r.dir, "--listen", r.listen,
		"--replica-id", r.id, "--advertise-url", r.url, "--work-root", filepath.Join(root, "work"))
	r.cmd.Env, r.cmd.Stdout, r.cmd.Stderr = env, f, f
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return r.cmd.Start()
}

func (r *replica) stop() {
	if r.cmd != nil && r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	if r.log != nil {
		r.log.Close()
	}
}

// waitLeader waits for a replica other than not to answer /readyz 200.
func waitLeader(rs []*replica, not *replica, within time.Duration) (*replica, error) {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			if r == not {
				continue
			}
			resp, err := hc.Get(r.url + "/readyz")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && resp.Header.Get("X-Gpufleet-Role") == "leader" {
				return r, nil
			}
		}
		time.Sleep(5 * time.Millisecond) // polling other processes; bounded by the deadline
	}
	return nil, fmt.Errorf("no leader within %s", within)
}

// firstPass finds, in r's log, the first "first scheduling pass done"
// logged after since, and the takeover's tail.
func firstPass(r *replica, since time.Time, within time.Duration) (time.Time, string, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		f, err := os.Open(r.log.Name())
		if err != nil {
			return time.Time{}, "", err
		}
		var tail string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			at, ok := logTime(line)
			if !ok || at.Before(since) {
				continue
			}
			if strings.Contains(line, "took over from the replica's state") {
				tail = field(line, "tail_changes") + " (took " + field(line, "took") + ")"
			}
			if strings.Contains(line, "loading state from the store") {
				tail = "reloaded from the store"
			}
			if strings.Contains(line, "first scheduling pass done") {
				f.Close()
				return at, tail, nil
			}
		}
		f.Close()
		time.Sleep(20 * time.Millisecond) // polling a log file; bounded by the deadline
	}
	return time.Time{}, "", errors.New("no first scheduling pass logged by " + r.id)
}

// logTime reads slog's time=… field.
func logTime(line string) (time.Time, bool) {
	v := field(line, "time")
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// field reads key's value from a log line, text (key=v) or JSON
// ("key":"v").
func field(line, key string) string {
	if i := strings.Index(line, `"`+key+`":`); i >= 0 {
		v := line[i+len(key)+3:]
		if j := strings.IndexAny(v, ",}"); j >= 0 {
			v = v[:j]
		}
		return strings.Trim(v, `"`)
	}
	i := strings.Index(line, key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+1:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return strings.Trim(v, `"`)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cleanEnv is the environment without GPUFLEET_* settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUFLEET_") {
			env = append(env, kv)
		}
	}
	return env
}
