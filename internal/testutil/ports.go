package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// PortRun returns the first of n consecutive ports free on 127.0.0.1, for
// a service whose replicas take PORT+slot. It is drawn below Linux's
// ephemeral range (32768–60999), so the outgoing connections of tests
// running beside this one cannot take one of the ports between the check
// and the replica's listen, as they can a port the kernel hands out for
// ":0".
func PortRun(t testing.TB, n int) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no run of free ports below the ephemeral range")
	return 0
}
