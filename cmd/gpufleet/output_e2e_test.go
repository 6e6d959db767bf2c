package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// listCommands are the commands whose -o json is a list, with the
// arguments each needs against a fresh server. Every one must print
// {"items": [...]}.
var listCommands = map[string][]string{
	"artifacts list":      {"--project", "default"},
	"audit":               nil,
	"budgets list":        nil,
	"config get-contexts": nil,
	"cost forecast":       nil,
	"cost purchase":       nil,
	"events":              nil,
	"gpus":                nil,
	"history":             nil,
	"jobs list":           {"--all"},
	"jobs top":            nil,
	"nodes list":          nil,
	"offers":              nil,
	"projects":            nil,
	"queues list":         nil,
	"roles list":          nil,
	"secrets list":        {"default"},
	"services list":       nil,
	"tokens list":         nil,
	"users":               nil,
}

// listVariants are further list-printing forms of commands above.
var listVariants = [][]string{
	{"offers", "--unavailable"},
	{"offers", "--gpu", "H100", "--page", "2", "--limit", "5"},
}

// objectCommands print one object (a report, a job, a result) as JSON:
// not lists, so not wrapped; their -o may also be a file or folder.
var objectCommands = []string{
	"advise", "artifacts get", "bench", "budgets get", "cost", "drift", "explain", "explain service", "images check", "jobs cancel",
	"jobs export", "jobs get", "nodes get", "plan", "queues get", "run", "services get", "simulate", "store check",
	"store migrate", "tokens create", "version",
}

// TestListOutputsAreItems walks the command tree: every command with -o
// is classified as a list or an object, and every list prints
// {"items": [...]} in JSON and YAML against a real server, which
// -o jsonpath reads.
func TestListOutputsAreItems(t *testing.T) {
	var unclassified []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("output") != nil {
			path := strings.TrimPrefix(c.CommandPath(), "gpufleet ")
			_, isList := listCommands[path]
			if !isList && !slices.Contains(objectCommands, path) {
				unclassified = append(unclassified, path)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if len(unclassified) > 0 {
		t.Fatalf("commands with -o that are neither in listCommands nor in objectCommands (a list prints {\"items\": [...]}; add it to one): %s",
			strings.Join(unclassified, ", "))
	}

	s := startServer(t, t.TempDir(), freePort(t))
	// Something in the lists: a running job (jobs, top, events).
	id := strings.TrimSpace(s.gpufleetOut("run", "--gpus", "1", "--", "sleep", "600"))
	s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	defer s.gpufleet("jobs", "cancel", id)

	runs := listVariants
	for path, args := range listCommands {
		runs = append(runs, append(strings.Fields(path), args...))
	}
	t.Run("lists", func(t *testing.T) {
		for _, args := range runs {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				out := s.gpufleetOut(append(args, "-o", "json")...)
				var doc any
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatalf("-o json is not JSON (%v):\n%s", err, out)
				}
				obj, ok := doc.(map[string]any)
				if !ok {
					t.Fatalf("-o json is a %T, want {\"items\": [...]}:\n%s", doc, out)
				}
				list, ok := obj["items"].([]any)
				if !ok {
					t.Fatalf("-o json has no items list:\n%s", out)
				}
				yout := s.gpufleetOut(append(args, "-o", "yaml")...)
				var ydoc map[string]any
				if err := yaml.Unmarshal([]byte(yout), &ydoc); err != nil {
					t.Fatalf("-o yaml is not a mapping (%v):\n%s", err, yout)
				}
				if ylist, ok := ydoc["items"].([]any); !ok || len(ylist) != len(list) {
					t.Errorf("-o yaml has items %v, want the %d of -o json:\n%s", ydoc["items"], len(list), yout)
				}
				// jsonpath reads the same document.
				if n := s.gpufleetOut(append(args, "-o", "jsonpath={.items[*]}")...); len(list) == 0 && strings.TrimSpace(n) != "" {
					t.Errorf("-o jsonpath={.items[*]} printed %q for an empty list", n)
				}
			})
		}
	})

	// Lists that must not be empty here, and jsonpath picking fields.
	for args, want := range map[string]string{
		"nodes list -o jsonpath={.items[*].state}":          "ready",
		"jobs list -o jsonpath={.items[*].state}":           "running",
		"jobs top -o jsonpath={.items[*].job}":              id,
		"gpus -o jsonpath={.items[?(@.gpu==\"H100\")].gpu}": "H100",
		"offers --limit 3 -o jsonpath={.limit},{.page}":     "3,1",
	} {
		if got := s.gpufleetOut(strings.Fields(args)...); !strings.Contains(got, want) {
			t.Errorf("gpufleet %s = %q, want %q in it", args, got, want)
		}
	}
	// jobs top into a pipe: plain tables one after another, no terminal
	// escape, until interrupted.
	top := s.gpufleetCmd("jobs", "top", "--interval", "300ms")
	topOut := &testutil.SyncBuffer{}
	top.Stdout, top.Stderr = topOut, topOut
	if err := top.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); strings.Count(topOut.String(), id) < 2 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // polling another process's output; bounded by the deadline
	}
	_ = top.Process.Signal(os.Interrupt)
	_ = top.Wait()
	if got := topOut.String(); strings.Count(got, id) < 2 || strings.Contains(got, "\x1b") {
		t.Errorf("jobs top into a pipe: want two tables or more naming %s and no escape sequence:\n%q", id, got)
	}

	out, err := s.gpufleetErr("nodes", "list", "-o", "jsonpath={.items[")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(out, "jsonpath") {
		t.Errorf("a bad template: %v, %q; want exit %d naming jsonpath", err, out, exitUsage)
	}
}
