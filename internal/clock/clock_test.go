package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	late := f.After(2 * time.Second)
	early := f.After(time.Second)
	tick := f.NewTicker(500 * time.Millisecond)
	defer tick.Stop()

	f.Advance(999 * time.Millisecond)
	select {
	case <-early:
		t.Fatal("timer fired before its deadline")
	default:
	}
	if got := <-tick.C(); !got.Equal(start.Add(500 * time.Millisecond)) {
		t.Fatalf("first tick at %v, want +500ms", got.Sub(start))
	}
	f.Advance(time.Millisecond)
	if got := <-early; !got.Equal(start.Add(time.Second)) {
		t.Fatalf("early fired at %v, want +1s", got.Sub(start))
	}
	f.Advance(time.Second)
	if got := <-late; !got.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("late fired at %v, want +2s", got.Sub(start))
	}
	if !f.Now().Equal(start.Add(2 * time.Second)) {
		t.Fatalf("now = %v, want +2s", f.Now().Sub(start))
	}
}

func TestFakeStoppedTickerIsRemoved(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(time.Second)
	if f.Waiters() != 1 {
		t.Fatalf("waiters = %d, want 1", f.Waiters())
	}
	tk.Stop()
	f.Advance(3 * time.Second)
	if f.Waiters() != 0 {
		t.Fatalf("waiters after stop = %d, want 0", f.Waiters())
	}
}
