package runtime

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenEnv makes this test binary a stand-in replica: it listens on the
// address in the variable, prints "listening", and answers each
// connection with "hello".
const listenEnv = "GPUFLEET_TEST_NETNS_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(listenEnv); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(2)
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(3)
			}
			io.WriteString(c, "hello\n")
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// TestPrivateNetworkIsReachableOnlyByDialingIn: a workload started in a
// private network namespace listens on 127.0.0.1:PORT there; on the host
// the same address refuses (nothing of the workload's is in reach), and
// only a dial from inside its namespace reaches it.
func TestPrivateNetworkIsReachableOnlyByDialingIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root (CAP_SYS_ADMIN)")
	}
	// A free port on the host, closed again: it stays free there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), listenEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := StartInPrivateNetwork(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("the workload did not listen: %q %v", line, err)
	}

	// This thread's, not /proc/self's: the process's main thread may be
	// the one that made the namespace (Go keeps it, wedged, never reused).
	goruntime.LockOSThread()
	host, err := os.Readlink("/proc/thread-self/ns/net")
	goruntime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	} else if child, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)); err != nil || child == host {
		t.Fatalf("the workload shares the host's network namespace (%s, %s, %v)", host, child, err)
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the workload's port %s is reachable from the host", addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 { // several dials: each enters the namespace afresh
		c, err := DialIn(ctx, cmd.Process.Pid, addr)
		if err != nil {
			t.Fatalf("dialing into the workload's namespace: %v", err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || strings.TrimSpace(got) != "hello" {
			t.Fatalf("through the namespace: %q %v", got, err)
		}
	}
	// The dialing threads never came back to the host's namespace: a
	// plain dial from this process still cannot reach the workload.
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatal("after DialIn, a plain dial reaches the workload: a thread kept its namespace")
	}
}
