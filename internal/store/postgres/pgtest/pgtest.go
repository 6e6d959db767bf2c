// Package pgtest runs a real PostgreSQL server for tests: initdb into a
// temporary directory (as an unprivileged user when the test runs as root,
// since PostgreSQL refuses root), postgres on a loopback port with its own
// socket directory, and a fresh database per test. Nothing outside tests
// imports it.
//
// One server serves a whole test binary: it starts at the first DSN call and
// is stopped, by its PID, when Main's m.Run returns. With CI=true a missing
// PostgreSQL fails the test; otherwise it is skipped with a message.
//
// The superuser has a random password and TCP connections must give it
// (scram-sha-256), so DSNs carry a real secret that tests can look for in
// logs.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinEnv names a folder holding initdb and postgres, to use instead of
// searching PATH and /usr/lib/postgresql/*/bin.
const BinEnv = "GPUFLEET_PG_BIN"

// server is the running PostgreSQL of this test binary.
type server struct {
	dir      string // temporary root: data/, sock/, log
	cmd      *exec.Cmd
	exited   chan struct{}
	port     int
	password string
}

var (
	once     sync.Once
	started  *server
	startErr error
	dbSeq    atomic.Int64
)

// Main runs the tests, then stops the server if one was started. Call it
// from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if started != nil {
		if err := started.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// DSN creates an empty database for t and returns a postgres:// URL for it
// (with the password); the database is dropped when t ends.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(func() { started, startErr = start() })
	if startErr != nil {
		var missing *missingError
		if errors.As(startErr, &missing) && os.Getenv("CI") != "true" {
			t.Skipf("pgtest: %v (set CI=true to fail instead)", startErr)
		}
		t.Fatalf("pgtest: %v", startErr)
	}
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), sanitize(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := started.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := started.admin(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return started.url(name)
}

// Password is the superuser's password, so tests can check it never
// reaches a log. It starts the server if need be.
func Password(t testing.TB) string {
	t.Helper()
	DSN(t) // starts the server, or skips
	return started.password
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// sanitize makes a test name into part of a database name (63 bytes at most
// in all).
func sanitize(name string) string {
	s := unsafeChars.ReplaceAllString(strings.ToLower(name), "_")
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

func (s *server) url(db string) string {
	return fmt.Sprintf("postgres://gpufleet:%s@127.0.0.1:%d/%s?sslmode=disable", s.password, s.port, db)
}

// admin runs one statement in the postgres database.
func (s *server) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// missingError says PostgreSQL is not installed.
type missingError struct{ what string }

func (e *missingError) Error() string {
	return fmt.Sprintf("PostgreSQL not found (%s): install Debian's postgresql, or set %s to the folder holding initdb and postgres", e.what, BinEnv)
}

// binDir finds the folder of initdb and postgres.
func binDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", &missingError{what: "no initdb in PATH or /usr/lib/postgresql/*/bin"}
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// runAs is the user the server runs as: this process's own, or when that is
// root an unprivileged one (postgres, or gpufleet-pg created for the
// purpose).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "gpufleet-pg").CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "already exists") {
			return nil, fmt.Errorf("creating user gpufleet-pg to run PostgreSQL as (it refuses root): %v: %s", err, out)
		}
		if u, err = user.Lookup("gpufleet-pg"); err != nil {
			return nil, fmt.Errorf("looking up gpufleet-pg: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func start() (*server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, &missingError{what: err.Error()}
		}
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpufleet-pgtest-")
	if err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	s := &server{dir: dir, password: hex.EncodeToString(pw), exited: make(chan struct{})}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, sock, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "gpufleet", "--pwfile", pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	// A port chosen by the kernel; should another process take it before
	// postgres binds it, the start fails and is retried on another.
	for try := 0; ; try++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = s.run(bin, data, sock, cred); err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts postgres and waits until it accepts connections.
func (s *server) run(bin, data, sock string, cred *syscall.Credential) error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// fsync stays on: the store's durability and its benchmarks are real.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.port), "-k", sock,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=128MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.admin(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start: %s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
	}
}

// stop shuts the server down by its PID (fast shutdown, then SIGKILL) and
// removes its files.
func (s *server) stop() error {
	defer os.RemoveAll(s.dir)
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		return nil
	case <-time.After(20 * time.Second):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	return errors.New("postgres ignored SIGINT for 20s; killed")
}
