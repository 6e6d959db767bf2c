package ckptsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/gpufleet/gpufleet/internal/objstore"
)

// ReuseWindow bounds how old an object found in the store (and referenced
// by no checkpoint the uploader knows) may be for an upload to name it
// instead of sending the content again. Garbage collection (package
// artifacts) removes unreferenced objects only well past it, so an object
// an upload reuses is never one being collected.
const ReuseWindow = 6 * time.Hour

// maxManifest bounds a manifest's sealed size when read.
const maxManifest = 64 << 20

// JobPrefix is job's folder in a store: a keyed hash of its id under the
// project's data key, so the bucket does not show job ids.
func JobPrefix(sl *objstore.Sealer, jobID string) string {
	sum := sha256.Sum256([]byte("job\x00" + jobID))
	return sl.Name(sum[:])[:32] + "/"
}

// ObjectKey is the key of the content named name in the folder prefix.
func ObjectKey(prefix, name string) string { return prefix + "o/" + name }

// HistoryKey is the key a manifest whose JSON is data is kept under in the
// folder prefix (<prefix>m/<name>).
func HistoryKey(prefix string, sl *objstore.Sealer, data []byte) string {
	sum := sha256.Sum256(data)
	return prefix + "m/" + sl.Name(sum[:])
}

// LatestKey is the key of the job folder prefix's latest checkpoint.
func LatestKey(prefix string) string { return prefix + "latest" }

// ReadManifest reads and opens the sealed manifest under key. A manifest
// that does not open or parse fails with objstore.ErrCorrupt naming key.
func ReadManifest(ctx context.Context, st objstore.Store, sl *objstore.Sealer, key string) (Manifest, error) {
	data, err := ReadManifestBytes(ctx, st, sl, key)
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %s: %w: %w", key, objstore.ErrCorrupt, err)
	}
	return m, nil
}

// ReadManifestBytes reads and opens the sealed manifest under key, as
// stored (its HistoryKey is of these bytes).
func ReadManifestBytes(ctx context.Context, st objstore.Store, sl *objstore.Sealer, key string) ([]byte, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(sl.Open(rc, key), maxManifest))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", key, err)
	}
	return data, nil
}

// WriteManifest seals and stores m under key; it returns the JSON stored.
func WriteManifest(ctx context.Context, st objstore.Store, sl *objstore.Sealer, key string, m Manifest) ([]byte, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if _, err := st.Put(ctx, key, sl.Seal(bytes.NewReader(data), key), objstore.SealedSize(int64(len(data)))); err != nil {
		return nil, err
	}
	return data, nil
}

// OpenFile opens the content of f, stored in the folder prefix, as
// plaintext. The reader verifies as it goes: the seal of every chunk, and
// at the end f's size and SHA-256; a mismatch fails the read with
// objstore.ErrCorrupt naming the object and f's path, so a caller that
// reads to EOF without error has exactly f's bytes.
func OpenFile(ctx context.Context, st objstore.Store, sl *objstore.Sealer, prefix string, f File) (io.ReadCloser, error) {
	key := ObjectKey(prefix, f.Object)
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &verifier{rc: rc, r: sl.Open(rc, key), h: sha256.New(), f: f, key: key}, nil
}

type verifier struct {
	rc  io.Closer
	r   io.Reader
	h   hash.Hash
	n   int64
	f   File
	key string
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		if got := hex.EncodeToString(v.h.Sum(nil)); v.n != v.f.Size || got != v.f.SHA256 {
			return n, fmt.Errorf("object %s of %s: got %d bytes with sha256 %s, want %d with %s: %w", v.key, v.f.Path, v.n, got, v.f.Size, v.f.SHA256, objstore.ErrCorrupt)
		}
	case err != nil:
		return n, fmt.Errorf("object %s of %s: %w", v.key, v.f.Path, err)
	case v.n > v.f.Size:
		return n, fmt.Errorf("object %s of %s: longer than its %d bytes: %w", v.key, v.f.Path, v.f.Size, objstore.ErrCorrupt)
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }
