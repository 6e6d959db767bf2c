package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// childEnv, when set, makes the test binary run ackWriter on the database
// it names instead of the tests: the process TestDurableUnderKill kills.
const childEnv = "GPUFLEET_SQLITE_TEST_WRITER_DB"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		if err := ackWriter(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ackWriter submits batches from several goroutines, as the API server does,
// and prints each job's id once its batch is acknowledged. It runs until it
// is killed, or stops at a bound in case its parent is gone.
func ackWriter(path string) error {
	const writers, perWriter = 8, 100_000
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				id := fmt.Sprintf("job-%d-%d", w, i)
				b := &store.Batch{
					Jobs:        []*model.Job{testJob(id, uint64(i*writers+w+1), 1)},
					Idempotency: []store.Idempotency{testIdempotency("writer", id, id, time.Now().Add(time.Hour))},
				}
				if err := <-s.Submit(b); err != nil {
					fail(err)
					return
				}
				// One write per line, so a kill cannot split one.
				if _, err := os.Stdout.WriteString(id + "\n"); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, s.Close())...)
}

// TestDurableUnderKill SIGKILLs a writer process mid-stream and checks that
// every write it acknowledged survived.
func TestDurableUnderKill(t *testing.T) {
	t.Parallel()
	const killAfter = 500
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	cmd := exec.Command(os.Args[0]) // TestMain turns the test binary into ackWriter
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting writer: %v", err)
	}

	// Every line read was acknowledged before the kill, including those
	// still in the pipe when it lands.
	acked := map[string]bool{}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		acked[lines.Text()] = true
		if len(acked) == killAfter {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatalf("killing writer: %v", err)
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Exited() {
		t.Fatalf("writer was not killed (acknowledged %d): %v\n%s", len(acked), err, stderr.Bytes())
	}

	d := load(t, reopen(t, path, Options{}))
	lost := map[string]bool{}
	for id := range acked {
		lost[id] = true
	}
	for _, j := range d.Jobs {
		delete(lost, j.ID)
	}
	if diff := cmp.Diff(map[string]bool{}, lost); diff != "" {
		t.Errorf("acknowledged jobs missing after kill (-want +got):\n%s", diff)
	}
	t.Logf("writer acknowledged %d jobs before dying; %d jobs stored", len(acked), len(d.Jobs))
}
