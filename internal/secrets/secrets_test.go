package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}

func TestSealOpen(t *testing.T) {
	kr, err := NewKeyring(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("secret/nlp/HF_TOKEN")
	sealed, err := kr.Seal([]byte("hf_abcdef123456"), aad)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "hf_abcdef") {
		t.Fatal("sealed value contains the plaintext")
	}
	again, _ := kr.Seal([]byte("hf_abcdef123456"), aad)
	if again == sealed {
		t.Fatal("two seals of one value are equal: nonces repeat")
	}
	pt, err := kr.Open(sealed, aad)
	if err != nil || string(pt) != "hf_abcdef123456" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	if _, err := kr.Open(sealed, []byte("secret/other/HF_TOKEN")); !errors.Is(err, ErrTampered) {
		t.Fatalf("moved to another record: %v, want ErrTampered", err)
	}
	flipped := []byte(sealed)
	flipped[len(flipped)-3] ^= 1
	if _, err := kr.Open(string(flipped), aad); !errors.Is(err, ErrTampered) {
		t.Fatalf("flipped byte: %v, want ErrTampered", err)
	}
	for _, bad := range []string{"", "gfs1", "gfs1:x", "nope:a:b", "gfs1:" + keyID(testKey(1)) + ":!!"} {
		if _, err := kr.Open(bad, aad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
}

func TestRotation(t *testing.T) {
	old, _ := NewKeyring(testKey(1))
	sealed, _ := old.Seal([]byte("v"), nil)
	both, _ := NewKeyring(testKey(1), testKey(2))
	if both.Current(sealed) {
		t.Fatal("value sealed with the old key reported current")
	}
	resealed, err := both.Reseal(sealed, nil)
	if err != nil || !both.Current(resealed) {
		t.Fatalf("Reseal = %v, current=%v", err, both.Current(resealed))
	}
	retired, _ := NewKeyring(testKey(2))
	if _, err := retired.Open(sealed, nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("old value after retiring its key: %v, want ErrNoKey", err)
	}
	if pt, err := retired.Open(resealed, nil); err != nil || string(pt) != "v" {
		t.Fatalf("resealed value after rotation: %q, %v", pt, err)
	}
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := CreateKeyFile(path); err != nil {
		t.Fatal(err)
	}
	if err := CreateKeyFile(path); err == nil {
		t.Fatal("existing key file overwritten")
	}
	kr, err := LoadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Seal([]byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key file: %v, want a chmod hint", err)
	}
	if _, err := ParseKeys("zz"); err == nil {
		t.Fatal("non-hex key accepted")
	}
	if _, err := NewKeyring([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

func TestScrubber(t *testing.T) {
	s := NewScrubber("gfj_secretjobtoken", "hunter2-long", "1")
	got := s.Scrub("token=gfj_secretjobtoken pw=hunter2-long n=1")
	if got != "token=[redacted] pw=[redacted] n=1" {
		t.Fatalf("Scrub = %q", got)
	}
}

func FuzzOpen(f *testing.F) {
	kr, _ := NewKeyring(testKey(1))
	good, _ := kr.Seal([]byte("value"), []byte("aad"))
	f.Add(good, []byte("aad"))
	f.Add("gfs1:00000000:AAAA", []byte(nil))
	f.Fuzz(func(t *testing.T, sealed string, aad []byte) {
		pt, err := kr.Open(sealed, aad)
		// Only a seal made with this key opens, and this test made one.
		if err == nil && (string(aad) != "aad" || string(pt) != "value") {
			t.Fatalf("forged value opened: %q", sealed)
		}
	})
}
