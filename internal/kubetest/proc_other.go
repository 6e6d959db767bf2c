//go:build !linux

package kubetest

import (
	"os"
	"syscall"
)

// The control plane's binaries are built for Linux; elsewhere these keep
// the package compiling.

func sysProcAttr() *syscall.SysProcAttr { return nil }

func kill(p *os.Process) { _ = p.Kill() }

func alive(int) bool { return true }
