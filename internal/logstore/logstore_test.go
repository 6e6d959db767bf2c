package logstore

import (
	"bytes"
	"testing"
)

func TestAppendIsIdempotentAndOrdered(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := Key{JobID: "j-1", Attempt: 1, Rank: 0}
	steps := []struct {
		name     string
		offset   int64
		data     string
		eof      bool
		wantSize int64
	}{
		{"first chunk", 0, "hello ", false, 6},
		{"resent chunk is ignored", 0, "hello ", false, 6},
		{"gap is refused", 10, "xx", false, 6},
		{"overlapping chunk appends only the new part", 3, "lo world\n", false, 12},
		{"eof", 12, "", true, 12},
	}
	for _, st := range steps {
		size, err := s.Append(k, st.offset, []byte(st.data), st.eof)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if size != st.wantSize {
			t.Fatalf("%s: size = %d, want %d", st.name, size, st.wantSize)
		}
	}
	var buf bytes.Buffer
	off, err := s.ReadAt(k, 0, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "hello world\n" || off != 12 {
		t.Fatalf("log = %q (offset %d), want %q", got, off, "hello world\n")
	}
	if _, complete, _ := s.Size(k); !complete {
		t.Fatal("log not marked complete after eof")
	}
}

func TestChangedFiresOnAppend(t *testing.T) {
	s, _ := New(t.TempDir())
	k := Key{JobID: "j-2", Attempt: 1}
	ch := s.Changed(k)
	if _, err := s.Append(k, 0, []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed channel not closed by Append")
	}
}

func TestRejectsPathEscape(t *testing.T) {
	s, _ := New(t.TempDir())
	for _, id := range []string{"../x", "a/b", "..", ""} {
		if _, err := s.Append(Key{JobID: id, Attempt: 1}, 0, []byte("x"), false); err == nil {
			t.Errorf("job id %q accepted", id)
		}
	}
}
