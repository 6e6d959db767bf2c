package supervisor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// replicaDir is a replica directory inside a replicas directory of its
// own, where a fence applies to it.
func replicaDir(t *testing.T) (replicas, dir string) {
	t.Helper()
	replicas = t.TempDir()
	dir = filepath.Join(replicas, "job1-a1-r0")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return replicas, dir
}

// A running child is ended once the node's fence passes: with its signal,
// and killed by KillAt however long its grace period.
func TestFenceEndsTheChild(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		script   string
		grace    time.Duration
		killIn   time.Duration
		want     supervisor.Exit
		maxTaken time.Duration
	}{
		"it leaves on its signal": {script: trapTerm, grace: 10 * time.Second, killIn: 10 * time.Second,
			want: supervisor.Exit{Code: 3, Reason: agentapi.ReasonFenced}, maxTaken: 8 * time.Second},
		// A grace period longer than the fence leaves: KillAt cuts it.
		"it ignores its signal": {script: `trap '' TERM; echo ready; sleep 60`, grace: time.Hour, killIn: 2 * time.Second,
			want: supervisor.Exit{Code: 137, Signal: "SIGKILL", Reason: agentapi.ReasonFenced}, maxTaken: 12 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			replicas, dir := replicaDir(t)
			s := spec("sh", "-c", tc.script)
			s.Grace = model.Duration(tc.grace)
			r := startIn(t, dir, s, nil)
			waitFor(t, "the child to start", func() bool { return strings.Contains(r.read(t, supervisor.OutputFile), "ready") })
			// Unfenced for a while: the child keeps running.
			if err := supervisor.WriteFence(replicas, supervisor.Fence{StopAt: time.Now().Add(time.Hour), KillAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // past a fence poll; the child must still run
			select {
			case <-r.done:
				t.Fatalf("the supervisor ended before its fence; its log:\n%s", r.read(t, supervisor.LogFile))
			default:
			}
			fenced := time.Now()
			if err := supervisor.WriteFence(replicas, supervisor.Fence{StopAt: fenced, KillAt: fenced.Add(tc.killIn)}); err != nil {
				t.Fatal(err)
			}
			got := r.exit(t)
			if diff := cmp.Diff(tc.want, got, ignoreTimes); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
			if taken := got.EndedAt.Sub(fenced); taken > tc.maxTaken {
				t.Errorf("the child ended %s after the fence passed, want within %s", taken, tc.maxTaken)
			}
		})
	}
}

// A child whose fence has already passed is never started.
func TestFencePassedStartsNothing(t *testing.T) {
	t.Parallel()
	replicas, dir := replicaDir(t)
	past := time.Now().Add(-time.Second)
	if err := supervisor.WriteFence(replicas, supervisor.Fence{StopAt: past, KillAt: past}); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := startIn(t, dir, spec("touch", marker), nil)
	got := r.exit(t)
	if diff := cmp.Diff(supervisor.Exit{Code: supervisor.CodeCannotRun, Reason: agentapi.ReasonFenced, NeverStarted: true}, got, ignoreTimes); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the child ran after its fence had passed")
	}
}

// TestFenceFollowsTheBootClock: a fence's boot-clock deadlines decide, not
// its wall-clock ones, so a wall-clock step can neither stop a node early
// nor let it run late; a fence without them (an older agent's) falls back
// to the wall clock.
func TestFenceFollowsTheBootClock(t *testing.T) {
	now, boot := time.Now(), supervisor.BootTime()
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	for name, tc := range map[string]struct {
		f    supervisor.Fence
		want bool
	}{
		"boot passed, wall ahead (clock stepped back)":    {supervisor.Fence{StopAt: future, KillAt: future, StopBoot: boot - time.Second, KillBoot: boot + time.Second}, true},
		"boot ahead, wall passed (clock stepped forward)": {supervisor.Fence{StopAt: past, KillAt: past, StopBoot: boot + time.Hour, KillBoot: boot + 2*time.Hour}, false},
		"no boot readings, wall passed":                   {supervisor.Fence{StopAt: past, KillAt: past}, true},
		"no boot readings, wall ahead":                    {supervisor.Fence{StopAt: future, KillAt: future}, false},
	} {
		if got := tc.f.Stopped(); got != tc.want {
			t.Errorf("%s: stopped %v, want %v", name, got, tc.want)
		}
	}
	f := supervisor.Fence{KillAt: past, KillBoot: boot + time.Minute}
	if left := time.Until(f.Kill()); left < 50*time.Second || left > time.Minute {
		t.Errorf("kill in %s by the boot clock, want about a minute", left)
	}
}

// A fence's stop is acted on when it falls, not at the next fence poll
// (once a second): a supervisor that read the fence before its stop arms a
// timer for it, so a child that ignores its signal is killed at KillAt even
// when KillAt follows StopAt closely. Each case writes the fence at another
// offset from the supervisors' poll phase; without the timer a case fails
// whenever its poll falls more than the slack after the stop (about half of
// the time each).
func TestFenceStopNeedsNoPoll(t *testing.T) {
	t.Parallel()
	const slack = 400 * time.Millisecond
	for _, stopIn := range []time.Duration{1200 * time.Millisecond, 1500 * time.Millisecond, 1800 * time.Millisecond} {
		t.Run(stopIn.String(), func(t *testing.T) {
			t.Parallel()
			replicas, dir := replicaDir(t)
			s := spec("sh", "-c", `trap '' TERM; echo ready; sleep 60`)
			s.Grace = model.Duration(time.Hour)
			r := startIn(t, dir, s, nil)
			waitFor(t, "the child to start", func() bool { return strings.Contains(r.read(t, supervisor.OutputFile), "ready") })
			written := time.Now()
			kill := written.Add(stopIn + 100*time.Millisecond)
			if err := supervisor.WriteFence(replicas, supervisor.Fence{StopAt: written.Add(stopIn), KillAt: kill}); err != nil {
				t.Fatal(err)
			}
			got := r.exit(t)
			if got.Reason != agentapi.ReasonFenced {
				t.Fatalf("ended with reason %q, want %q", got.Reason, agentapi.ReasonFenced)
			}
			if late := got.EndedAt.Sub(kill); late > slack {
				t.Errorf("the child ended %s after the fence's KillAt, want within %s", late, slack)
			}
		})
	}
}
