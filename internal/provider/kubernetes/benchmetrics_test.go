package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// apiRequests counts the API server's requests by "VERB resource" from its
// apiserver_request_total metric, summed over codes and scopes.
func apiRequests(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := metricLabels(labels)
		key := l["verb"] + " " + l["resource"]
		if s := l["subresource"]; s != "" {
			key += "/" + s
		}
		out[key] += n
	}
	return out, sc.Err()
}

// metricLabels parses `a="x",b="y"` (values without escaped quotes, as
// the labels read here are).
func metricLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// requestDelta formats after − before, the largest first, omitting
// reads of fewer than min requests.
func requestDelta(before, after map[string]float64, min float64) string {
	type row struct {
		key string
		n   float64
	}
	var rows []row
	total := 0.0
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if d := after[k] - before[k]; d >= min {
			rows = append(rows, row{k, d})
			total += d
		}
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(b.n - a.n) })
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f requests:", total)
	for _, r := range rows {
		fmt.Fprintf(&b, " %s=%.0f", r.key, r.n)
	}
	return b.String()
}

// cpuTimes is the CPU time (user + system) used so far by this process
// ("gpufleet+bench") and by each child process (the control plane), by
// command name.
func cpuTimes() map[string]time.Duration {
	out := map[string]time.Duration{}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out["test"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime(14) stime(15), counted after ")".
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != self || pid == self {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[s[open+1:end]] += time.Duration(ut+st) * time.Second / clockTicks
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux platform Go supports.
const clockTicks = 100

// cpuDelta formats after − before per process.
func cpuDelta(before, after map[string]time.Duration) string {
	var b strings.Builder
	total := time.Duration(0)
	for _, k := range slices.Sorted(maps.Keys(after)) {
		d := after[k] - before[k]
		total += d
		fmt.Fprintf(&b, " %s=%.1fs", k, d.Seconds())
	}
	return fmt.Sprintf("CPU %.1fs:%s", total.Seconds(), b.String())
}

// profileAPIServer writes a CPU profile of the API server's next seconds
// to dir/name.pprof, when dir is set (GPUFLEET_KUBE_BENCH_PROFILE).
func profileAPIServer(ctx context.Context, b *testing.B, cs kubernetes.Interface, dir, name string, seconds int) {
	if dir == "" {
		return
	}
	go func() {
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".pprof"), raw, 0o644)
		}
		if err != nil {
			b.Logf("profiling the API server: %v", err)
		}
	}()
}
