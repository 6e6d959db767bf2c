//go:build tools

// Package etcd blank-imports the etcd server command so that go.mod and
// go.sum pin everything it needs.
package etcd

import _ "go.etcd.io/etcd/server/v3"
