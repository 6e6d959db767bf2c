// Package store is a stand-in for the real one, for wrappers_test.go.
package store

type Batch struct{}

type Store interface {
	Submit(b *Batch) <-chan error
}

func Prepare(s Store, b *Batch) func() <-chan error {
	return func() <-chan error { return s.Submit(b) }
}
