package kubetest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// proc is one component: a child process whose stdout and stderr go to log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read only after done
}

// spawn starts bin/name with args plus opts.ExtraArgs[name], in its own
// process group, killed if the test binary dies.
func (cp *controlPlane) spawn(opts Options, name string, args ...string) (*proc, error) {
	args = append(args, opts.ExtraArgs[name]...)
	logPath := filepath.Join(cp.dir, "logs", name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.Command(filepath.Join(cp.bin, "bin", name), args...)
	cmd.Dir = cp.dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	// HOME is the control plane's folder so that nothing in the
	// developer's home (~/.kwok/kwok.yaml, ~/.kube) leaks in.
	cmd.Env = append(os.Environ(), "HOME="+cp.dir, "KUBECONFIG=")
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// stop SIGKILLs every component and its process group and reaps them.
func (cp *controlPlane) stop() {
	cp.stopOnce.Do(func() {
		cp.mu.Lock()
		procs := cp.procs
		cp.mu.Unlock()
		for _, p := range procs {
			kill(p.cmd.Process)
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
		}
	})
}

// logTails writes the end of every component's log to t's log.
func (cp *controlPlane) logTails(t testing.TB) {
	t.Helper()
	cp.mu.Lock()
	procs := cp.procs
	cp.mu.Unlock()
	for _, p := range procs {
		t.Logf("kubetest: last lines of %s (%s):\n%s", p.name, p.log, tail(p.log, 40, 8<<10))
	}
}

// tail returns at most the last n lines, and at most maxBytes, of path.
func tail(path string, n, maxBytes int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(0, st.Size()-int64(maxBytes))
	buf, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return err.Error()
	}
	buf = bytes.TrimRight(buf, "\n")
	all := strings.Split(string(buf), "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return strings.Join(all, "\n")
}

// sweepSharedDirs removes the folders of shared control planes whose test
// binary has exited (their children died with it).
func sweepSharedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || alive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}
