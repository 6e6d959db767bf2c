package objstore

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// ErrCorrupt: a sealed object does not open with the data key and its
// name: it was altered, truncated, or moved from another name or project.
var ErrCorrupt = errors.New("sealed object is corrupt, truncated or under the wrong name")

// Sealed object format (version 1):
//
//	"GFO1" || salt (32 bytes) || chunk_0 || … || chunk_n
//
// Each chunk is AES-256-GCM of up to SealChunk plaintext bytes under a key
// derived from the data key and the object's random salt (HKDF-SHA256), with
// the chunk's index as nonce and the caller's binding plus a "final" flag as
// associated data. A fresh key per object keeps counter nonces unique; the
// final flag makes a truncation at a chunk boundary fail to open.
const (
	sealMagic = "GFO1"
	saltLen   = 32
	// SealChunk is the plaintext size of one sealed chunk.
	SealChunk = 1 << 20
	tagLen    = 16
	headerLen = len(sealMagic) + saltLen
)

// SealedSize is the size of the sealed form of n plaintext bytes.
func SealedSize(n int64) int64 {
	chunks := (n + SealChunk - 1) / SealChunk
	if chunks == 0 {
		chunks = 1
	}
	return int64(headerLen) + n + chunks*tagLen
}

// Sealer seals and opens objects under one project's data key, and names
// content so that equal files share an object without the name revealing
// anything of them. It is immutable and safe for concurrent use.
type Sealer struct {
	key []byte // the data key
	mac []byte // names: HMAC-SHA256 key derived from it
}

// NewSealer returns a Sealer for a 32-byte data key.
func NewSealer(dataKey []byte) (*Sealer, error) {
	if len(dataKey) != 32 {
		return nil, fmt.Errorf("data key is %d bytes, want 32", len(dataKey))
	}
	mac, err := hkdf.Key(sha256.New, dataKey, nil, "gpufleet objstore names v1", 32)
	if err != nil {
		return nil, err
	}
	return &Sealer{key: append([]byte(nil), dataKey...), mac: mac}, nil
}

// Name returns the opaque name of content with SHA-256 digest sum: a keyed
// hash, so equal content has equal names within a project while a reader
// of the bucket cannot test a guess of the content.
func (s *Sealer) Name(sum []byte) string {
	h := hmac.New(sha256.New, s.mac)
	h.Write(sum)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Sealer) aead(salt []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, s.key, salt, "gpufleet objstore object v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func chunkNonce(i uint64) []byte {
	n := make([]byte, 12)
	binary.BigEndian.PutUint64(n[4:], i)
	return n
}

func chunkAAD(binding string, final bool) []byte {
	f := byte(0)
	if final {
		f = 1
	}
	return append([]byte(binding+"\x00"), f)
}

// Seal returns a reader of r's content sealed and bound to binding (the
// object's name, say): opening it under another binding fails.
func (s *Sealer) Seal(r io.Reader, binding string) io.Reader {
	return &sealReader{s: s, src: bufio.NewReaderSize(r, SealChunk), binding: binding}
}

type sealReader struct {
	s       *Sealer
	src     *bufio.Reader
	binding string
	aead    cipher.AEAD
	index   uint64
	out     []byte // sealed bytes not yet read
	buf     []byte
	plain   []byte
	done    bool
	err     error
}

func (z *sealReader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.err != nil {
			return 0, z.err
		}
		if z.done {
			return 0, io.EOF
		}
		z.err = z.next()
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

func (z *sealReader) next() error {
	if z.aead == nil {
		salt := make([]byte, saltLen)
		if _, err := rand.Read(salt); err != nil {
			return fmt.Errorf("reading random bytes: %w", err)
		}
		a, err := z.s.aead(salt)
		if err != nil {
			return err
		}
		z.aead = a
		z.buf = make([]byte, 0, SealChunk+tagLen)
		z.plain = make([]byte, SealChunk)
		z.out = append([]byte(sealMagic), salt...)
		return nil
	}
	plain := z.plain
	n, err := io.ReadFull(z.src, plain)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	final := n < SealChunk
	if !final {
		if _, perr := z.src.Peek(1); perr == io.EOF {
			final = true
		} else if perr != nil {
			return perr
		}
	}
	z.out = z.aead.Seal(z.buf[:0], chunkNonce(z.index), plain[:n], chunkAAD(z.binding, final))
	z.index++
	z.done = final
	return nil
}

// Open returns a reader of the plaintext of the sealed r bound to binding.
// Reads fail with ErrCorrupt at the first chunk that does not open; a
// caller must not trust bytes read before an error.
func (s *Sealer) Open(r io.Reader, binding string) io.Reader {
	return &openReader{s: s, src: bufio.NewReaderSize(r, SealChunk+tagLen), binding: binding}
}

type openReader struct {
	s       *Sealer
	src     *bufio.Reader
	binding string
	aead    cipher.AEAD
	index   uint64
	out     []byte
	buf     []byte
	done    bool
	err     error
}

func (o *openReader) Read(p []byte) (int, error) {
	for len(o.out) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		if o.done {
			return 0, io.EOF
		}
		o.err = o.next()
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	return n, nil
}

func (o *openReader) next() error {
	if o.aead == nil {
		hdr := make([]byte, headerLen)
		if _, err := io.ReadFull(o.src, hdr); err != nil {
			return fmt.Errorf("%w: reading its header: %w", ErrCorrupt, err)
		}
		if string(hdr[:len(sealMagic)]) != sealMagic {
			return fmt.Errorf("%w: not a sealed object", ErrCorrupt)
		}
		a, err := o.s.aead(hdr[len(sealMagic):])
		if err != nil {
			return err
		}
		o.aead = a
		o.buf = make([]byte, SealChunk+tagLen)
	}
	n, err := io.ReadFull(o.src, o.buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	final := n < len(o.buf)
	if !final {
		if _, perr := o.src.Peek(1); perr == io.EOF {
			final = true
		} else if perr != nil {
			return perr
		}
	}
	plain, err := o.aead.Open(o.buf[:0], chunkNonce(o.index), o.buf[:n], chunkAAD(o.binding, final))
	if err != nil {
		return fmt.Errorf("%w (chunk %d)", ErrCorrupt, o.index)
	}
	o.out = plain
	o.index++
	o.done = final
	return nil
}
