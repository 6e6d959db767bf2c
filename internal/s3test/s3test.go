// Package s3test starts a real S3-compatible server for tests: versitygw
// (Versity S3 Gateway, Apache-2.0) serving a temporary folder on a loopback
// port, with a readiness poll, stopped by its own PID when the test ends.
//
// The binary is found at $GPUFLEET_VERSITYGW, else in the cache folder that
// .ci/run fills (~/.cache/gpufleet/bin/versitygw-<Version>/versitygw). With
// CI=true a missing binary fails the test; otherwise it skips with the
// command that builds it.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Version is the versitygw release the tests run against.
const Version = "v1.8.0"

// Root credentials of every server started here.
const (
	AccessKey = "gpufleettest"
	SecretKey = "gpufleettestsecret123"
	Region    = "us-east-1"
)

// Server is one running versitygw.
type Server struct {
	// Endpoint is its base URL (http://127.0.0.1:PORT), path-style.
	Endpoint string
	// Root is the folder it serves: each bucket is a folder in it, each
	// object a file, so a test can read what was stored raw.
	Root string
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the versitygw binary's path, or a reason to skip.
func Binary() (path, skip string) {
	if p := os.Getenv("GPUFLEET_VERSITYGW"); p != "" {
		return p, ""
	}
	cache := os.Getenv("GPUFLEET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpufleet")
	}
	dir := filepath.Join(cache, "bin", "versitygw-"+Version)
	p := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(p); err == nil {
		return p, ""
	}
	return "", fmt.Sprintf("versitygw %s not found at %s: build it once with `GOBIN=%s go install github.com/versity/versitygw/cmd/versitygw@%s` (about 4 minutes on 2 cores), or set GPUFLEET_VERSITYGW", Version, p, dir, Version)
}

// Start runs a versitygw for t over a fresh folder and waits until it
// answers; it is killed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, skip := Binary()
	if skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s", skip)
		}
		t.Skip(skip)
	}
	root := filepath.Join(t.TempDir(), "s3")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(filepath.Dir(root), "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting versitygw: %v", err)
	}
	s := &Server{Endpoint: "http://" + addr, Root: root, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return s // any answer (403 without a signature) means it serves
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("versitygw exited before it served: %s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("versitygw did not answer on %s within 30s: %s", addr, log)
		}
	}
}

// Stop kills the server (by its own PID) and waits for it. Idempotent.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-s.done
}

// Client returns an SDK client for the server with the root credentials.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// CreateBucket makes a bucket and returns its folder under Root.
func (s *Server) CreateBucket(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
	return filepath.Join(s.Root, name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
