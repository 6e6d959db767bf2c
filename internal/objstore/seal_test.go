package objstore_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"

	"github.com/gpufleet/gpufleet/internal/objstore"
)

func sealer(t *testing.T) *objstore.Sealer {
	k := make([]byte, 32)
	rand.Read(k)
	s, err := objstore.NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealRoundTrip(t *testing.T) {
	t.Parallel()
	s := sealer(t)
	for _, n := range []int{0, 1, objstore.SealChunk - 1, objstore.SealChunk, objstore.SealChunk + 1, 3*objstore.SealChunk + 7} {
		plain := make([]byte, n)
		rand.Read(plain)
		sealed, err := io.ReadAll(s.Seal(bytes.NewReader(plain), "obj"))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(sealed)) != objstore.SealedSize(int64(n)) {
			t.Errorf("%d bytes: sealed %d, SealedSize says %d", n, len(sealed), objstore.SealedSize(int64(n)))
		}
		if n > 16 && bytes.Contains(sealed, plain[:16]) {
			t.Errorf("%d bytes: the sealed form contains plaintext", n)
		}
		got, err := io.ReadAll(s.Open(bytes.NewReader(sealed), "obj"))
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%d bytes: open gave %d bytes, %v", n, len(got), err)
		}
	}
}

func TestSealRefusesTampering(t *testing.T) {
	t.Parallel()
	s := sealer(t)
	plain := make([]byte, 2*objstore.SealChunk+10)
	sealed, _ := io.ReadAll(s.Seal(bytes.NewReader(plain), "obj"))
	chunk := objstore.SealChunk + 16
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)/2] ^= 1
	for name, tc := range map[string]struct {
		data    []byte
		binding string
		s       *objstore.Sealer
	}{
		"flipped bit":          {flipped, "obj", s},
		"truncated at a chunk": {sealed[:36+2*chunk], "obj", s},
		"truncated mid-chunk":  {sealed[:len(sealed)-3], "obj", s},
		"other name":           {sealed, "other", s},
		"other key":            {sealed, "obj", sealer(t)},
		"not sealed":           {plain, "obj", s},
	} {
		if _, err := io.ReadAll(tc.s.Open(bytes.NewReader(tc.data), tc.binding)); !errors.Is(err, objstore.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func TestSealNamesAreKeyed(t *testing.T) {
	t.Parallel()
	a, b := sealer(t), sealer(t)
	sum := []byte("0123456789abcdef0123456789abcdef")
	if a.Name(sum) != a.Name(sum) || a.Name(sum) == b.Name(sum) {
		t.Error("names must be stable under one key and differ between keys")
	}
}
