package groupcommit

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPipelinedSendsWhileOneIsInFlight holds the first group's finish
// until a second group has been sent: only a committer that forms and
// sends the next group while one is in flight gets past it. Groups finish
// in the order sent, and every batch is acknowledged once.
func TestPipelinedSendsWhileOneIsInFlight(t *testing.T) {
	var (
		mu       sync.Mutex
		sent     [][]int
		finished [][]int
		second   = make(chan struct{})
	)
	send := func(group []int) func() ([]error, error) {
		mu.Lock()
		sent = append(sent, group)
		n := len(sent)
		mu.Unlock()
		if n == 2 {
			close(second)
		}
		return func() ([]error, error) {
			if n == 1 {
				select {
				case <-second:
				case <-time.After(10 * time.Second):
					return nil, errors.New("no second group was sent while the first was in flight")
				}
			}
			mu.Lock()
			finished = append(finished, group)
			mu.Unlock()
			return make([]error, len(group)), nil
		}
	}
	c := StartPipelined(send, func(int) int { return 1 }, Options{Depth: 2})
	first := c.Submit(0)
	var rest []<-chan error
	// The first group is in flight (its finish waits): what follows forms
	// the second.
	for {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= 5; i++ {
		rest = append(rest, c.Submit(i))
	}
	for i, ch := range append([]<-chan error{first}, rest...) {
		if err := <-ch; err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	c.Close()
	if !slices.EqualFunc(sent, finished, slices.Equal) {
		t.Errorf("groups finished %v, sent %v: want the order sent", finished, sent)
	}
	var all []int
	for _, g := range finished {
		all = append(all, g...)
	}
	if !slices.Equal(all, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("batches written %v, want 0–5 once each in Submit order", all)
	}
	if st := c.Stats(); st.Commits != uint64(len(sent)) || st.Batches != 6 {
		t.Errorf("stats %+v, want %d commits of 6 batches", st, len(sent))
	}
}

// TestPipelinedDepthBound checks that no more than Depth groups are ever
// in flight.
func TestPipelinedDepthBound(t *testing.T) {
	for _, depth := range []int{1, 2, 3} {
		var (
			mu            sync.Mutex
			inFlight, top int
		)
		send := func(group []int) func() ([]error, error) {
			mu.Lock()
			inFlight++
			top = max(top, inFlight)
			mu.Unlock()
			return func() ([]error, error) {
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				inFlight--
				mu.Unlock()
				return make([]error, len(group)), nil
			}
		}
		c := StartPipelined(send, func(int) int { return 1 }, Options{Depth: depth})
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				if err := <-c.Submit(i); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		c.Close()
		if top > depth {
			t.Errorf("depth %d: %d groups were in flight at once", depth, top)
		}
	}
}

// TestFailedGroupFailsOnlyItsCallers fails the second group as a whole and
// one batch of the third: the first group's callers, the fourth's and the
// third's other batches succeed; the second's callers get its error.
func TestFailedGroupFailsOnlyItsCallers(t *testing.T) {
	groupErr, rowErr := errors.New("commit failed"), errors.New("row refused")
	gate := make(chan struct{})
	var (
		mu     sync.Mutex
		groups [][]int
	)
	send := func(group []int) func() ([]error, error) {
		mu.Lock()
		groups = append(groups, group)
		n := len(groups)
		mu.Unlock()
		return func() ([]error, error) {
			if n == 1 {
				<-gate // the others queue up behind it
			}
			errs := make([]error, len(group))
			switch n {
			case 2:
				return nil, groupErr
			case 3:
				errs[0] = rowErr
			}
			return errs, nil
		}
	}
	c := StartPipelined(send, func(int) int { return 1 }, Options{Depth: 2, MaxBatch: 2})
	var chans []<-chan error
	for i := range 7 {
		chans = append(chans, c.Submit(i))
		if i == 0 {
			for {
				mu.Lock()
				n := len(groups)
				mu.Unlock()
				if n == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	close(gate)
	got := make([]error, len(chans))
	for i, ch := range chans {
		got[i] = <-ch
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	want := map[int]error{}
	for g, group := range groups {
		for k, item := range group {
			switch {
			case g == 1:
				want[item] = groupErr
			case g == 2 && k == 0:
				want[item] = rowErr
			}
		}
	}
	for i, err := range got {
		if !errors.Is(err, want[i]) || (want[i] == nil) != (err == nil) {
			t.Errorf("batch %d (groups %v): got %v, want %v", i, groups, err, want[i])
		}
	}
	if st := c.Stats(); st.Failures != 1 {
		t.Errorf("stats %+v, want 1 failure", st)
	}
}
