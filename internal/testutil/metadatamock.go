package testutil

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// MetadataMockVersion is the amazon-ec2-metadata-mock release .ci/run
// builds into ~/.cache/gpufleet/ec2-metadata-mock-<version>/.
const MetadataMockVersion = "v1.13.0"

// MetadataMockBinary finds AWS's ec2-metadata-mock: $GPUFLEET_EC2_METADATA_MOCK,
// the CI cache, or PATH. Without it the test is skipped, or fails with
// CI=true.
func MetadataMockBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("GPUFLEET_EC2_METADATA_MOCK"); p != "" {
		return p
	}
	cache := os.Getenv("GPUFLEET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpufleet")
	}
	if p := filepath.Join(cache, "ec2-metadata-mock-"+MetadataMockVersion, "ec2-metadata-mock"); isFile(p) {
		return p
	}
	if p, err := exec.LookPath("ec2-metadata-mock"); err == nil {
		return p
	}
	msg := "ec2-metadata-mock not found: go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@" + MetadataMockVersion + " (or run .ci/run)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// MetadataMock is how StartMetadataMock runs ec2-metadata-mock.
type MetadataMock struct {
	// Addr is the loopback host:port it listens on; empty: a free port.
	Addr string
	// InstanceID, when set, is the instance id it serves (its own
	// default is i-1234567890abcdef0).
	InstanceID string
	// Args are its subcommand and schedule, e.g. "spot",
	// "--mock-delay-sec", "2".
	Args []string
}

// StartMetadataMock starts ec2-metadata-mock as m says, IMDSv2 only,
// stops it when the test ends, and returns its URL once it answers.
func StartMetadataMock(t testing.TB, m MetadataMock) string {
	t.Helper()
	bin := MetadataMockBinary(t)
	if m.Addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m.Addr = l.Addr().String()
		l.Close()
	}
	host, port, err := net.SplitHostPort(m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir() // it looks for a config file in $HOME
	args := append(append([]string(nil), m.Args...), "--imdsv2", "--hostname", host, "--port", port)
	if m.InstanceID != "" {
		cfg, _ := json.Marshal(map[string]any{"metadata": map[string]any{"values": map[string]string{"instance-id": m.InstanceID}}})
		path := filepath.Join(home, "aemm-config.json")
		if err := os.WriteFile(path, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config-file", path)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.Dir = home
	log, err := os.Create(filepath.Join(home, "mock.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("ec2-metadata-mock log:\n%s", b)
		}
	})
	url := "http://" + m.Addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPut, url+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ec2-metadata-mock did not answer on %s", url)
		}
		time.Sleep(50 * time.Millisecond) // waiting for a child process to listen; bounded by the deadline
	}
}
