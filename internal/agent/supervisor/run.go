package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// DefaultPath is the child's PATH when the supervisor's environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Exit codes of a child that could not be started, as shells report them.
const (
	CodeCannotRun = 126
	CodeNotFound  = 127
	// CodeContainerFailed: the container could not be made (its image
	// could not be pulled, say), as podman reports it.
	CodeContainerFailed = 125
)

const (
	// reapTimeout bounds the wait for the child's process group to die after
	// SIGKILL; a process inside a GPU driver call can take seconds to go.
	reapTimeout = 30 * time.Second
	reapPoll    = 20 * time.Millisecond
	// outputDrain bounds the wait for the child's output after its group
	// is gone (a process that left the group may hold the pipe).
	outputDrain = 2 * time.Second
	// exitRetry is how often an exit record that could not be written
	// (a full disk) is tried again.
	exitRetry = 5 * time.Second
)

// Run supervises the replica described by dir/spec.json until it ends and
// returns the process exit status: 0 once exit.json is written, 1 when the
// supervisor could not record its pid or the exit (the agent then reports
// the replica lost). It is the body of `gpufleet supervise --dir DIR` and
// owns the process: it handles SIGTERM (stop the replica) and logs to stderr.
// Run uses the wall clock: runtime limits and grace periods are real time.
func Run(dir string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica_dir", dir)
	// Handle the agent's stop request before pid.json can tell it our pid.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	defer signal.Stop(stop)

	abs, err := filepath.Abs(dir)
	if err != nil {
		log.Error("resolving replica directory", "err", err)
		return 1
	}
	s := &supervisor{dir: abs, log: log}
	start, err := ProcessStartTime(os.Getpid())
	if err != nil {
		log.Error("recording supervisor pid", "err", err)
		return 1
	}
	s.pids.Supervisor = Process{PID: os.Getpid(), Start: start, StartedAt: time.Now()}
	if err := writeJSON(filepath.Join(abs, PIDFile), s.pids); err != nil {
		log.Error("recording supervisor pid", "err", err)
		return 1
	}

	// Room for the exit record, set aside before anything can fill the
	// disk: a replica that finished must not be rerun for want of space.
	if err := reserve(abs); err != nil {
		log.Warn("reserving room for the exit record", "err", err)
	}
	exit, err := s.supervise(stop)
	if err != nil {
		// Without an exit record the agent reports the replica lost, which
		// is the truth: how it ended is unknown.
		log.Error("supervising replica", "err", err)
		return 1
	}
	s.recordExit(exit)
	s.log.Info("replica exited", "exit_code", exit.Code, "signal", exit.Signal, "reason", exit.Reason)
	return 0
}

// recordExit writes exit.json, first into the room reserve set aside; on
// failure (a full disk) it tries again every exitRetry for as long as it
// takes. Meanwhile the supervisor lives on, so the agent sees the replica
// still running rather than lost, and reports its real end once written.
func (s *supervisor) recordExit(exit Exit) {
	path := filepath.Join(s.dir, ExitFile)
	for try := 0; ; try++ {
		if try == 0 {
			os.Remove(filepath.Join(s.dir, reserveFile)) // free its room for the record
		}
		err := writeJSON(path, exit)
		if err == nil {
			return
		}
		s.log.Error("recording replica exit; trying again", "err", err, "exit_code", exit.Code, "retry_in", exitRetry)
		time.Sleep(exitRetry)
	}
}

type supervisor struct {
	dir  string
	log  *slog.Logger
	pids PIDs
	// rt carries out sb, once the spec is read.
	rt runtime.Runtime
	sb runtime.Sandbox
}

// supervise starts the child, waits for it to end, and returns its exit
// record. Failures to start are exit records too; the error is for a child
// whose end could not be observed.
func (s *supervisor) supervise(stop <-chan os.Signal) (Exit, error) {
	spec, err := ReadSpec(s.dir)
	if err != nil {
		return s.notStarted(nil, CodeCannotRun, err), nil
	}
	s.log = s.log.With("replica_id", spec.ID)
	out, err := os.OpenFile(filepath.Join(s.dir, OutputFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return s.notStarted(nil, CodeCannotRun, fmt.Errorf("opening output log: %w", err)), nil
	}
	defer out.Close()
	sig, err := parseSignal(spec.Signal)
	if err != nil {
		return s.notStarted(out, CodeCannotRun, fmt.Errorf("reading spec: %w", err)), nil
	}
	sb, rt, err := s.sandbox(spec)
	if err != nil {
		return s.notStarted(out, CodeCannotRun, err), nil
	}
	s.rt, s.sb = rt, sb
	if err := rt.Prepare(context.Background(), sb); err != nil {
		return s.notStarted(out, CodeContainerFailed, err), nil
	}
	// The child writes into a pipe, not the file: its output is capped
	// (sb.LogLimit, the tail kept) and a full disk cannot stall it.
	pr, pw, err := os.Pipe()
	if err != nil {
		return s.notStarted(out, CodeCannotRun, fmt.Errorf("creating the output pipe: %w", err)), nil
	}
	cmd, err := rt.Command(sb, spec.Command, pw)
	if err != nil {
		pr.Close()
		pw.Close()
		code := CodeCannotRun
		if errors.Is(err, exec.ErrNotFound) {
			code = CodeNotFound
		}
		return s.notStarted(out, code, err), nil
	}

	if f, ok, _ := ReadFence(s.dir); ok && f.Stopped() {
		// The server may already have given the node up: starting now
		// could run the work beside its retry elsewhere.
		pr.Close()
		pw.Close()
		return s.fencedBeforeStart(out), nil
	}
	started := time.Now()
	err = runtime.Start(sb, cmd)
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		code := CodeCannotRun
		if errors.Is(err, fs.ErrNotExist) {
			code = CodeNotFound
		}
		if errors.Is(err, fs.ErrPermission) && sb.User != nil && sb.Runtime == runtime.Process {
			err = fmt.Errorf("%w: the job runs as uid %d, which cannot enter its workdir %s or run %s; "+
				"a host folder must be reachable by workload users (o+x on every folder above it), or upload it (gpufleet run --upload-workdir)",
				err, sb.User.UID, sb.Workdir, spec.Command[0])
		}
		return s.notStarted(out, code, fmt.Errorf("starting %s: %w", spec.Command[0], err)), nil
	}
	logs := startCopier(pr, newOutput(out, sb.LogLimit))
	pgid := cmd.Process.Pid
	// The child is ours and unreaped, so its stat stays readable even if it
	// has already exited.
	childStart, err := ProcessStartTime(pgid)
	if err != nil {
		s.log.Warn("reading child start time", "pid", pgid, "err", err)
	}
	s.pids.Child = &Process{PID: pgid, Start: childStart, StartedAt: started}
	if err := writeJSON(filepath.Join(s.dir, PIDFile), s.pids); err != nil {
		// The agent will not see the replica running, only its exit.
		s.log.Error("recording child pid", "pid", pgid, "err", err)
	}
	s.log.Info("replica started", "pid", pgid, "program", cmd.Path)

	reason := s.watch(pgid, spec, sig, stop)
	ended := time.Now()
	s.killGroup(pgid)
	if err := rt.Cleanup(context.Background(), sb); err != nil {
		s.log.Warn("cleaning up after the replica", "err", err)
	}
	logs.wait(outputDrain)
	// Wait reaps the child. Its error is a non-zero exit, read from
	// ProcessState below, unless there is no status at all.
	if err := cmd.Wait(); cmd.ProcessState == nil {
		return Exit{}, fmt.Errorf("waiting for child %d: %w", pgid, err)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	exit := Exit{Code: ws.ExitStatus(), Reason: reason, StartedAt: started, EndedAt: ended}
	if ws.Signaled() {
		exit.Code = 128 + int(ws.Signal())
		exit.Signal = signalName(ws.Signal())
	}
	return exit, nil
}

// notStarted is the exit record of a child that could not be started. The
// reason also goes to the output log, where the user looks first.
func (s *supervisor) notStarted(out *os.File, code int, err error) Exit {
	s.log.Error("starting replica", "err", err, "exit_code", code)
	if out != nil {
		fmt.Fprintf(out, "gpufleet supervise: %v\n", err)
	}
	now := time.Now()
	return Exit{Code: code, Reason: err.Error(), StartedAt: now, EndedAt: now}
}

// fencedBeforeStart is the exit record of a child not started because the
// fence's StopAt had passed.
func (s *supervisor) fencedBeforeStart(out *os.File) Exit {
	s.log.Warn("not starting the replica: the node's fence has passed", "reason", agentapi.ReasonFenced)
	fmt.Fprintf(out, "gpufleet supervise: not started: %s\n", agentapi.ReasonFenced)
	now := time.Now()
	return Exit{Code: CodeCannotRun, Reason: agentapi.ReasonFenced, StartedAt: now, EndedAt: now, NeverStarted: true}
}

// watch waits for the child to exit, ending it when its runtime passes, the
// agent asks to stop or the node's fence passes, and returns why it ended
// it ("" when the child exited on its own). The child is left unreaped, so
// its pid, and with it the process group id, cannot be reused while the
// group is being signalled.
func (s *supervisor) watch(pgid int, spec agentapi.ReplicaSpec, sig syscall.Signal, stop <-chan os.Signal) string {
	exited := make(chan error, 1)
	go func() { exited <- waitExited(pgid) }()
	var limit, kill <-chan time.Time
	if spec.Runtime > 0 {
		t := time.NewTimer(spec.Runtime.D())
		defer t.Stop()
		limit = t.C
	}
	fence := time.NewTicker(fencePoll)
	defer fence.Stop()
	reason := ""
	var killBy time.Time // when the grace period ends
	end := func(why string, latest time.Time) {
		if reason == "" {
			reason = why
			grace := spec.Grace.D()
			if !latest.IsZero() {
				grace = max(0, min(grace, time.Until(latest)))
			}
			s.log.Info("ending replica", "reason", why, "signal", signalName(sig), "grace", grace)
			s.signalWorkload(pgid, sig)
			killBy = time.Now().Add(grace)
			kill = time.After(grace)
			return
		}
		// Already ending; the first reason stands, but a fence shortens
		// the grace period.
		if !latest.IsZero() && kill != nil && latest.Before(killBy) {
			killBy = latest
			kill = time.After(max(0, time.Until(latest)))
		}
	}
	// due fires at the stop of the fence last read when that comes before
	// the next poll, so a stop is acted on when it falls, not up to a poll
	// later (which would eat into the stop-to-kill margin, H/6).
	var due <-chan time.Time
	readFence := func() {
		f, ok, err := ReadFence(s.dir)
		if err != nil {
			s.log.Warn("reading the node's fence", "err", err)
		}
		if !ok {
			return
		}
		if f.Stopped() {
			end(agentapi.ReasonFenced, f.Kill())
		} else if d := f.untilStop(); d < fencePoll {
			due = time.After(d)
		}
	}
	readFence()
	for {
		select {
		case <-fence.C:
			readFence()
		case <-due:
			due = nil
			readFence() // the fence may have moved since: read it again
		case err := <-exited:
			if err != nil {
				// Not expected for our own child; the group is killed and
				// reaped next, so nothing is left behind either way.
				s.log.Error("waiting for child", "pid", pgid, "err", err)
			}
			return reason
		case <-limit:
			end(model.ReasonRuntimeLimit, time.Time{})
		case <-stop:
			end(agentapi.ReasonStopped, time.Time{})
		case <-kill:
			s.log.Info("grace period over; killing replica", "pid", pgid)
			s.signalWorkload(pgid, syscall.SIGKILL)
			kill = nil
		}
	}
}

// killGroup kills whatever the child left in its process group and waits,
// up to reapTimeout, until none of it is alive.
func (s *supervisor) killGroup(pgid int) {
	deadline := time.Now().Add(reapTimeout)
	tick := time.NewTicker(reapPoll)
	defer tick.Stop()
	for {
		s.signalGroup(pgid, syscall.SIGKILL)
		live, err := groupLive(pgid)
		if err != nil {
			s.log.Error("checking the replica's process group", "pgid", pgid, "err", err)
			return
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			s.log.Warn("processes of the replica survive SIGKILL", "pgid", pgid, "waited", reapTimeout)
			return
		}
		<-tick.C
	}
}

// signalGroup signals the child's process group; signalWorkload signals
// the workload, which for a container is not in that group.
func (s *supervisor) signalGroup(pgid int, sig syscall.Signal) {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("signalling the replica's process group", "pgid", pgid, "signal", signalName(sig), "err", err)
	}
}

func (s *supervisor) signalWorkload(pgid int, sig syscall.Signal) {
	if err := s.rt.Signal(s.sb, pgid, sig); err != nil {
		s.log.Warn("signalling the replica", "signal", signalName(sig), "err", err)
	}
}

// waitExited blocks until child pid has exited but leaves it unreaped
// (waitid with WNOWAIT).
func waitExited(pid int) error {
	const idtypePID = 1 // P_PID
	var info [128]byte  // siginfo_t, unused
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, idtypePID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return fmt.Errorf("waiting for process %d: %w", pid, errno)
		}
	}
}

// sandbox returns how spec runs: the agent's record beside the spec, or,
// where there is none (the supervisor started by hand or by an agent of an
// earlier version), a process as the supervisor's own user with its work
// tree in dir/work. The workload's environment is set in it.
func (s *supervisor) sandbox(spec agentapi.ReplicaSpec) (runtime.Sandbox, runtime.Runtime, error) {
	sb, ok, err := ReadSandbox(s.dir)
	if err != nil {
		return sb, nil, fmt.Errorf("reading sandbox: %w", err)
	}
	if !ok {
		sb = runtime.Sandbox{Runtime: runtime.Process, Home: s.dir, Work: filepath.Join(s.dir, "work")}
		sb.Workdir = spec.Workdir
		if !filepath.IsAbs(sb.Workdir) {
			sb.Workdir = filepath.Join(sb.Work, sb.Workdir)
		}
	}
	rt, err := runtime.For(sb)
	if err != nil {
		return sb, nil, err
	}
	if sb.Runtime == runtime.Process {
		if err := os.MkdirAll(sb.Workdir, 0o755); err != nil {
			return sb, nil, fmt.Errorf("creating workdir: %w", err)
		}
		sb.Env = childEnv(spec.Env, os.LookupEnv)
	} else {
		// Nothing of the host's environment enters a container: its image
		// has its own PATH and the rest.
		sb.Env = maps.Clone(spec.Env)
		if sb.Env == nil {
			sb.Env = map[string]string{}
		}
	}
	maps.Copy(sb.Env, sb.EnvOverrides)
	return sb, rt, nil
}

// childEnv is the child's environment: the few variables a process expects
// from its host, taken from lookup (the supervisor's environment), under the
// spec's own.
func childEnv(spec map[string]string, lookup func(string) (string, bool)) map[string]string {
	env := map[string]string{"PATH": DefaultPath}
	// LD_LIBRARY_PATH is how many hosts point at their CUDA libraries.
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH"} {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	maps.Copy(env, spec)
	return env
}
