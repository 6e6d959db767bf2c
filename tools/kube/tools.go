//go:build tools

// Package kube blank-imports the control-plane commands so that go.mod and
// go.sum pin everything they need.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
