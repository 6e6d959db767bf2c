// Package sshtest starts a real OpenSSH server (Debian's openssh-server,
// /usr/sbin/sshd) for tests: on a loopback port, with its own host key,
// config and authorized_keys for a client key it generates, stopped by PID
// when the test ends. Logins as root are allowed with a key only
// (PermitRootLogin prohibit-password), so tests must run as root.
//
// Without sshd (or not as root) a test is skipped with a message that says
// how to install it; with CI=true it fails instead.
package sshtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/testutil"
)

// Binary is the sshd the harness starts.
const Binary = "/usr/sbin/sshd"

// Server is one running sshd.
type Server struct {
	// Address and Port are where it listens.
	Address string
	Port    int
	// HostKey is its public host key, "ssh-ed25519 AAAA…".
	HostKey string
	// KnownHosts is a known_hosts file vouching for HostKey at
	// [Address]:Port.
	KnownHosts string
	// ClientKey is the private key (OpenSSH format) it accepts for any
	// user; ClientPublic its public half.
	ClientKey    []byte
	ClientPublic string
	// Dir holds its files; Log its output.
	Dir string
	Log *testutil.SyncBuffer

	cmd   *exec.Cmd
	waitc chan error
}

// Options tune a server; the zero value is the usual.
type Options struct {
	// Config lines are appended to sshd_config.
	Config []string
}

// Require skips (or, with CI=true, fails) t when sshd cannot run here.
func Require(t testing.TB) {
	t.Helper()
	why := ""
	if _, err := os.Stat(Binary); err != nil {
		why = Binary + " is missing: apt-get install -y openssh-server"
	} else if _, err := exec.LookPath("ssh-keygen"); err != nil {
		why = "ssh-keygen is missing: apt-get install -y openssh-client"
	} else if os.Geteuid() != 0 {
		why = "sshd tests log in as root and must run as root"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s", why)
	}
	t.Skip(why)
}

// Start starts an sshd for t and stops it (by PID) when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	// sshd refuses to start without its privilege separation folder.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatalf("creating /run/sshd: %v", err)
	}
	s := &Server{Address: "127.0.0.1", Dir: dir}
	keygen(t, filepath.Join(dir, "host_ed25519"))
	keygen(t, filepath.Join(dir, "client_ed25519"))
	s.HostKey = readPub(t, filepath.Join(dir, "host_ed25519.pub"))
	s.ClientPublic = readPub(t, filepath.Join(dir, "client_ed25519.pub"))
	var err error
	if s.ClientKey, err = os.ReadFile(filepath.Join(dir, "client_ed25519")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(s.ClientPublic+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A free port may be taken between finding it and sshd binding it:
	// try a few.
	for attempt := 0; ; attempt++ {
		s.Port = freePort(t)
		if err = s.start(t, opts); err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("starting sshd: %v\n%s", err, s.Log)
		}
	}
	s.KnownHosts = filepath.Join(dir, "known_hosts")
	line := fmt.Sprintf("[%s]:%d %s\n", s.Address, s.Port, s.HostKey)
	if err := os.WriteFile(s.KnownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *Server) start(t testing.TB, opts Options) error {
	cfg := []string{
		"Port " + strconv.Itoa(s.Port),
		"ListenAddress " + s.Address,
		"HostKey " + filepath.Join(s.Dir, "host_ed25519"),
		"PidFile " + filepath.Join(s.Dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(s.Dir, "authorized_keys"),
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"UsePAM no",
		// t.TempDir's parents are not root-only as StrictModes wants.
		"StrictModes no",
		"AllowTcpForwarding yes",
		"LogLevel VERBOSE",
	}
	cfg = append(cfg, opts.Config...)
	path := filepath.Join(s.Dir, "sshd_config")
	if err := os.WriteFile(path, []byte(strings.Join(cfg, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	s.Log = &testutil.SyncBuffer{}
	cmd := exec.Command(Binary, "-D", "-e", "-f", path)
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("sshd exited: %v", err)
		default:
		}
		if banner(net.JoinHostPort(s.Address, strconv.Itoa(s.Port))) {
			s.cmd = cmd
			s.waitc = exited
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("sshd did not answer on port %d within 10s", s.Port)
}

// banner reports whether addr answers with an SSH banner.
func banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

func (s *Server) stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.waitc:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.waitc
	}
	if t.Failed() {
		t.Logf("sshd log:\n%s", s.Log)
	}
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Address, strconv.Itoa(s.Port)) }

// Keygen writes a new ed25519 key pair to path and path.pub and returns the
// private key and the public line.
func Keygen(t testing.TB, path string) ([]byte, string) {
	t.Helper()
	keygen(t, path)
	priv, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return priv, readPub(t, path+".pub")
}

func keygen(t testing.TB, path string) {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-test", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
}

// readPub returns "TYPE BASE64" from a .pub file, without the comment.
func readPub(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("%s: not a public key", path)
	}
	return f[0] + " " + f[1]
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
