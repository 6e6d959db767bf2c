// Package secrets seals values at rest (provider credentials, webhook keys,
// users' job secrets) with AES-256-GCM under a key kept outside the database:
// a key file of mode 0600, or the environment. Keys are rotatable: a Keyring
// seals with its newest key and opens with any key it still holds, so
// rotation is "add a key, re-seal, retire the old one".
//
// A sealed value is text: "gfs1:<key id>:<base64url(nonce || ciphertext)>".
// The caller's associated data (for example "secret/<project>/<name>") is
// bound into the seal, so a sealed value copied to another record does not
// open.
package secrets

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

const prefix = "gfs1"

// ErrNoKey: the value was sealed with a key the keyring does not hold.
var ErrNoKey = errors.New("sealed with a key this keyring does not hold")

// ErrTampered: the value does not open with its key and associated data.
var ErrTampered = errors.New("sealed value is corrupt or was moved from another record")

// Keyring holds sealing keys, newest last. It is immutable and safe for
// concurrent use.
type Keyring struct {
	keys []key
	byID map[string]cipher.AEAD
}

type key struct {
	id   string
	aead cipher.AEAD
}

// keyID names a key by its hash, so ids never reveal key bytes.
func keyID(k []byte) string {
	h := sha256.Sum256(append([]byte("gpufleet key id\x00"), k...))
	return hex.EncodeToString(h[:4])
}

// NewKeyring builds a keyring from raw 32-byte keys, oldest first.
func NewKeyring(raw ...[]byte) (*Keyring, error) {
	if len(raw) == 0 {
		return nil, errors.New("keyring needs at least one key")
	}
	kr := &Keyring{byID: map[string]cipher.AEAD{}}
	for i, k := range raw {
		if len(k) != 32 {
			return nil, fmt.Errorf("key %d is %d bytes, want 32", i+1, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		id := keyID(k)
		kr.keys = append(kr.keys, key{id: id, aead: aead})
		kr.byID[id] = aead
	}
	return kr, nil
}

// Seal encrypts plaintext bound to aad with the newest key.
func (kr *Keyring) Seal(plaintext, aad []byte) (string, error) {
	k := kr.keys[len(kr.keys)-1]
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	ct := k.aead.Seal(nonce, nonce, plaintext, aad)
	return prefix + ":" + k.id + ":" + base64.RawURLEncoding.EncodeToString(ct), nil
}

// Open decrypts a sealed value. It fails with ErrNoKey when the key is gone
// and ErrTampered when the value or aad does not match.
func (kr *Keyring) Open(sealed string, aad []byte) ([]byte, error) {
	parts := strings.SplitN(sealed, ":", 3)
	if len(parts) != 3 || parts[0] != prefix {
		return nil, fmt.Errorf("not a sealed value: %w", ErrTampered)
	}
	aead, ok := kr.byID[parts[1]]
	if !ok {
		return nil, fmt.Errorf("key %s: %w", parts[1], ErrNoKey)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, ErrTampered
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], aad)
	if err != nil {
		return nil, ErrTampered
	}
	return pt, nil
}

// Current reports whether sealed uses the newest key; values that do not
// should be re-sealed after a rotation.
func (kr *Keyring) Current(sealed string) bool {
	parts := strings.SplitN(sealed, ":", 3)
	return len(parts) == 3 && parts[1] == kr.keys[len(kr.keys)-1].id
}

// Reseal opens a value with whatever key sealed it and seals it again with
// the newest key.
func (kr *Keyring) Reseal(sealed string, aad []byte) (string, error) {
	pt, err := kr.Open(sealed, aad)
	if err != nil {
		return "", err
	}
	return kr.Seal(pt, aad)
}

// NewKey returns a fresh random key, hex-encoded as key files hold it.
func NewKey() (string, error) {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(k[:]), nil
}

// LoadKeyFile reads a key file: one hex key per line, oldest first, '#'
// comments allowed. The file must not be readable by group or others.
func LoadKeyFile(path string) (*Keyring, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %v: make it private with chmod 600 %s", path, info.Mode().Perm(), path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	defer f.Close()
	var raw [][]byte
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := hex.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("key file %s line %d: not hex", path, n)
		}
		raw = append(raw, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	return NewKeyring(raw...)
}

// ParseKeys reads keys from an environment value: hex keys separated by
// commas, oldest first.
func ParseKeys(v string) (*Keyring, error) {
	var raw [][]byte
	for i, s := range strings.Split(v, ",") {
		k, err := hex.DecodeString(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("key %d: not hex", i+1)
		}
		raw = append(raw, k)
	}
	return NewKeyring(raw...)
}

// CreateKeyFile writes a new key file with one fresh key, mode 0600, and
// refuses to overwrite an existing one.
func CreateKeyFile(path string) error {
	k, err := NewKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("key file %s exists; rotate with a new line instead of replacing it: %w", path, err)
	}
	if err != nil {
		return fmt.Errorf("creating key file: %w", err)
	}
	if _, err := fmt.Fprintf(f, "# gpufleet sealing keys, oldest first; keep this file outside the data dir's backups\n%s\n", k); err != nil {
		f.Close()
		return fmt.Errorf("writing key file: %w", err)
	}
	return f.Close()
}
