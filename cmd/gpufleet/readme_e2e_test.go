package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is one fenced shell block of README.md and its marker.
type readmeBlock struct {
	line   int // of the fence
	run    bool
	reason string // why it is skipped
	text   string
}

var readmeMarker = regexp.MustCompile(`^<!-- readme-test: (run|skip: (.+\S)) -->$`)

// readmeBlocks reads README.md's fenced sh/bash/console blocks; each must
// follow a marker line, <!-- readme-test: run --> or
// <!-- readme-test: skip: REASON -->.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out          []readmeBlock
		prev         string
		cur          *readmeBlock
		fenceOpen    bool
		otherFenceOn bool
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur, fenceOpen = nil, false
		case cur != nil:
			cur.text += l + "\n"
		case otherFenceOn:
			if strings.HasPrefix(l, "```") {
				otherFenceOn = false
			}
		case regexp.MustCompile("^```(sh|bash|console)\\s*$").MatchString(l):
			b := readmeBlock{line: n}
			m := readmeMarker.FindStringSubmatch(prev)
			switch {
			case m == nil:
				t.Errorf("README.md:%d: a shell block without a marker line before it: add <!-- readme-test: run --> or <!-- readme-test: skip: REASON -->", n)
			case m[1] == "run":
				b.run = true
			default:
				b.reason = m[2]
			}
			cur, fenceOpen = &b, true
		case strings.HasPrefix(l, "```"):
			otherFenceOn = true
		}
		if strings.TrimSpace(l) != "" {
			prev = l
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if fenceOpen {
		t.Errorf("README.md: a shell block is not closed")
	}
	return out
}

// Every shell block of README.md is marked run or skip (with a reason);
// the run ones are run, in order, with bash -euo pipefail against a real
// `up` (demo 4×H100) in a temporary home, as a user would paste them: the
// CLI on PATH, up's data dir in ~/.gpufleet, an empty CLI config, and
// 127.0.0.1:7777 (README's address) replaced by the test server's.
func TestReadmeSnippets(t *testing.T) {
	blocks := readmeBlocks(t, filepath.Join("..", "..", "README.md"))
	var run int
	for _, b := range blocks {
		if b.run {
			run++
		}
	}
	if run == 0 {
		t.Fatal("README.md has no block marked run")
	}
	if t.Failed() {
		return
	}
	// As on a user's machine: up's data dir is ~/.gpufleet, which the CLI
	// finds by itself (a GPUFLEET_DATA_DIR would make it prefer the local
	// server over a logged-in context).
	home := t.TempDir()
	s := startServer(t, filepath.Join(home, ".gpufleet"), freePort(t))
	env := append(cleanEnv(),
		"PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	for _, b := range blocks {
		if !b.run {
			t.Logf("README.md:%d skipped: %s", b.line, b.reason)
			continue
		}
		script := strings.ReplaceAll(b.text, "127.0.0.1:7777", s.listen)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Env, cmd.Dir = env, cliDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("README.md:%d failed: %v\n--- block\n%s--- output\n%s\n--- server log\n%s", b.line, err, b.text, out, s.out)
		}
		t.Logf("README.md:%d ran:\n%s", b.line, out)
	}
}
