package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// Names of the files in a replica directory.
const (
	SpecFile   = "spec.json"
	PIDFile    = "pid.json"
	ExitFile   = "exit.json"
	OutputFile = "output.log"
	LogFile    = "supervisor.log"
	// reserveFile holds room for exit.json on a disk that may fill up.
	reserveFile = "exit.reserve"
)

// reserveSize is the room set aside for the exit record and the temporary
// file it is written through: a few file-system blocks.
const reserveSize = 64 << 10

// reserve sets aside room for the exit record in dir.
func reserve(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, reserveFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(make([]byte, reserveSize))
	serr := f.Sync()
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = serr
	}
	return werr
}

// Exit is the record of how a replica ended (exit.json).
type Exit struct {
	// Code is the exit status; 128+n when the child was killed by signal n,
	// 127 when the program was not found, 126 when it could not be started.
	Code int `json:"code"`
	// Signal names the signal that killed the child ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// Reason says why the supervisor ended the child (model.ReasonRuntimeLimit,
	// agentapi.ReasonStopped) or why it could not start; empty when the child
	// exited on its own.
	Reason    string    `json:"reason,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	// NeverStarted: the supervisor refused to start the child because the
	// node's fence had passed (agentapi.ReasonFenced), so the command ran
	// zero times; the server requeues its job without counting a retry.
	NeverStarted bool `json:"neverStarted,omitempty"`
}

// PIDs is the record of the supervisor's processes (pid.json).
type PIDs struct {
	Supervisor Process `json:"supervisor"`
	// Child is nil until the child has started; it is also the child's
	// process group id.
	Child *Process `json:"child,omitempty"`
}

// Process identifies one process across pid reuse: a pid is only the same
// process while its start time matches.
type Process struct {
	PID int `json:"pid"`
	// Start is the process start time from /proc/<pid>/stat, in clock ticks
	// since boot (see ProcessStartTime).
	Start uint64 `json:"start"`
	// StartedAt is the wall-clock time the process was started.
	StartedAt time.Time `json:"startedAt"`
}

// WriteSpec writes spec.json for the supervisor to run. The spec carries the
// job's token, so the file is readable by its owner only.
func WriteSpec(dir string, spec agentapi.ReplicaSpec) error {
	return writeJSON(filepath.Join(dir, SpecFile), spec)
}

// ReadSpec reads spec.json.
func ReadSpec(dir string) (agentapi.ReplicaSpec, error) {
	var spec agentapi.ReplicaSpec
	_, err := readJSON(filepath.Join(dir, SpecFile), &spec)
	return spec, err
}

// WriteSandbox writes how the replica runs (runtime.SandboxFile), which the
// agent decides before launch.
func WriteSandbox(dir string, sb runtime.Sandbox) error {
	return writeJSON(filepath.Join(dir, runtime.SandboxFile), sb)
}

// ReadSandbox reads the replica's sandbox; ok is false when there is none
// (a replica started by an agent of an earlier version).
func ReadSandbox(dir string) (sb runtime.Sandbox, ok bool, err error) {
	ok, err = readJSON(filepath.Join(dir, runtime.SandboxFile), &sb)
	return sb, ok, err
}

// ReadExit reads exit.json; ok is false when there is none yet.
func ReadExit(dir string) (exit Exit, ok bool, err error) {
	ok, err = readJSON(filepath.Join(dir, ExitFile), &exit)
	return exit, ok, err
}

// ReadPIDs reads pid.json; ok is false when there is none yet.
func ReadPIDs(dir string) (pids PIDs, ok bool, err error) {
	ok, err = readJSON(filepath.Join(dir, PIDFile), &pids)
	return pids, ok, err
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return atomicfile.Write(path, append(data, '\n'), 0o600)
}

// readJSON decodes the file at path into v. A missing file is ok=false and
// no error.
func readJSON(path string, v any) (ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("decoding %s: %w", path, err)
	}
	return true, nil
}
