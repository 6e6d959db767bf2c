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
// With --load N, N clients submit jobs (queued, with idempotency keys,
// each retried until acknowledged) through every replica's URL from
// before the first kill to after the last: takeover under write load. Each
// run then also says how long writes went unacknowledged (kill → the first
// acknowledged submission sent after it) and the submissions acknowledged
// in the second before the kill.
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/api/client"
)

func main() {
	var (
		bin, dsn           string
		replicas, runs, nj int
		load               int
		keep               bool
	)
	flag.StringVar(&bin, "binary", "", "the gpufleet binary (required)")
	flag.StringVar(&dsn, "store", os.Getenv("GPUFLEET_TAKEOVER_STORE"), "postgres:// DSN of an empty database (env GPUFLEET_TAKEOVER_STORE)")
	flag.IntVar(&replicas, "replicas", 3, "server replicas")
	flag.IntVar(&runs, "runs", 10, "takeovers to measure")
	flag.IntVar(&nj, "jobs", 2000, "queued jobs submitted first: the state a new leader takes over")
	flag.IntVar(&load, "load", 0, "clients submitting jobs all through the runs (0: the leaders are idle when killed)")
	flag.BoolVar(&keep, "keep", false, "keep the replicas' folders and logs (the path is printed)")
	flag.Parse()
	if bin == "" || dsn == "" {
		fmt.Fprintln(os.Stderr, "takeover: --binary and --store are required (see go doc ./tools/takeover)")
		os.Exit(2)
	}
	if err := run(bin, dsn, replicas, runs, nj, load, keep); err != nil {
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

func run(bin, dsn string, n, runs, nj, load int, keep bool) error {
	root, err := os.MkdirTemp("", "gpufleet-takeover")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("replicas' folders and logs kept in", root)
	} else {
		defer os.RemoveAll(root)
	}
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
	// The leader writes its admin token once it serves, not before.
	var tok []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if tok, err = os.ReadFile(filepath.Join(lead.dir, "admin.token")); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	var urls []string
	for _, r := range rs {
		urls = append(urls, r.url)
	}
	c := client.New(strings.Join(urls, ","), strings.TrimSpace(string(tok)), nil)
	if err := seed(c, nj); err != nil {
		return err
	}
	w := startLoad(c, load)
	defer w.stop()
	fmt.Printf("%d replicas, %d queued jobs, %d clients submitting; killing the leader %d times\n", n, nj, load, runs)
	fmt.Println("run  killed  new leader  kill→first pass  kill→/readyz 200  kill→first ack  acks/s before  tail changes")
	var toPass, toReady, toAck []time.Duration
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
		ack, before := "-", "-"
		if load > 0 {
			at, err := w.firstAckAfter(killed, 60*time.Second)
			if err != nil {
				return err
			}
			toAck = append(toAck, at.Sub(killed))
			ack, before = at.Sub(killed).Round(time.Millisecond).String(), fmt.Sprint(w.acksIn(killed.Add(-time.Second), killed))
		}
		fmt.Printf("%3d  %6s  %10s  %15s  %16s  %14s  %13s  %s\n", i+1, lead.id, next.id, passAt.Sub(killed).Round(time.Millisecond), ready.Round(time.Millisecond), ack, before, tail)
		if err := lead.start(bin, env, root); err != nil {
			return err
		}
		lead = next
	}
	fmt.Printf("kill → first pass: p50 %s, max %s; kill → /readyz: p50 %s, max %s\n",
		pct(toPass, 0.5), pct(toPass, 1), pct(toReady, 0.5), pct(toReady, 1))
	if load > 0 {
		acked, failed := w.totals()
		fmt.Printf("kill → first acknowledged submission: p50 %s, max %s; %d submissions acknowledged in all, %d tries failed and were retried\n",
			pct(toAck, 0.5), pct(toAck, 1), acked, failed)
	}
	return nil
}

// writer is the --load clients: each submits queued jobs one after the
// other, every submission retried with its key until acknowledged.
type writer struct {
	mu     sync.Mutex
	acks   []ack // in the order answered
	failed int
	done   chan struct{}
	wg     sync.WaitGroup
}

// ack is one acknowledged submission: when its successful try was sent,
// and when its answer came.
type ack struct{ sent, at time.Time }

func startLoad(c *client.Client, clients int) *writer {
	w := &writer{done: make(chan struct{})}
	var next atomic.Int64
	for range clients {
		w.wg.Go(func() {
			for {
				i := next.Add(1)
				m := fmt.Sprintf(`{"apiVersion":"gpufleet.dev/v1","kind":"Job","metadata":{"name":"load-%d"},"spec":{"resources":{"gpus":8},"run":{"command":["true"]}}}`, i)
				for {
					select {
					case <-w.done:
						return
					default:
					}
					sent := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := c.SubmitJob(ctx, []byte(m), client.SubmitOptions{IdempotencyKey: fmt.Sprintf("load-%d", i)})
					cancel()
					w.mu.Lock()
					if err == nil {
						w.acks = append(w.acks, ack{sent, time.Now()})
					} else {
						w.failed++
					}
					w.mu.Unlock()
					if err == nil {
						break
					}
					time.Sleep(100 * time.Millisecond) // the control plane is failing over; retry with the same key
				}
			}
		})
	}
	return w
}

func (w *writer) stop() {
	close(w.done)
	w.wg.Wait()
}

// firstAckAfter waits for the first acknowledgement of a try sent after
// t (an answer the old leader gave just before the kill may be read
// after it).
func (w *writer) firstAckAfter(t time.Time, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		i, _ := slices.BinarySearchFunc(w.acks, t, func(a ack, t time.Time) int { return a.at.Compare(t) })
		var at time.Time
		for _, a := range w.acks[i:] {
			if a.sent.After(t) {
				at = a.at
				break
			}
		}
		w.mu.Unlock()
		if !at.IsZero() {
			return at, nil
		}
		time.Sleep(10 * time.Millisecond) // polling the clients' record; bounded by the deadline
	}
	return time.Time{}, fmt.Errorf("no submission acknowledged within %s of the kill", within)
}

// acksIn counts acknowledgements in [from, to).
func (w *writer) acksIn(from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.acks {
		if !a.at.Before(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

func (w *writer) totals() (acked, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks), w.failed
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
			if strings.Contains(line, "gpufleet is up") {
				if i := strings.Index(line, `"start":`); i >= 0 {
					tail += " start " + strings.TrimSuffix(line[i+len(`"start":`):], "}")
				}
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
