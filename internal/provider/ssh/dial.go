package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Errors a connection fails with; test with errors.Is.
var (
	// ErrHostKey: the host's key is not the pinned one, or known_hosts
	// does not vouch for it. gpufleet never connects past it.
	ErrHostKey = errors.New("host key not trusted")
	// ErrAuth: the host refused the private key.
	ErrAuth = errors.New("ssh authentication refused")
)

// Keys opens the sealed secrets that hold private keys. The consumer owns
// this interface; the server wires its vault to it.
type Keys interface {
	// OpenSecret returns the value of the secret ref names. Errors name
	// the ref, never the value.
	OpenSecret(ctx context.Context, ref model.SecretRef) ([]byte, error)
}

// Dialer opens SSH connections to hosts. It is safe for concurrent use.
type Dialer struct {
	Keys Keys
	// Timeout bounds each TCP connect and handshake (default 15s).
	Timeout time.Duration
}

// Dial connects to h, through its bastion when it has one, checking every
// host key. The caller closes the client.
func (d *Dialer) Dial(ctx context.Context, h Host) (*ssh.Client, error) {
	if h.Jump == nil {
		return d.dial(ctx, nil, endpoint{addr: h.Addr(), user: h.User, key: h.Identity, keyFile: h.IdentityFile, hostKey: h.HostKey, knownHosts: h.KnownHosts})
	}
	j := h.Jump
	jump, err := d.dial(ctx, nil, endpoint{addr: net.JoinHostPort(j.Address, strconv.Itoa(j.Port)), user: j.User, key: j.Identity, keyFile: j.IdentityFile, hostKey: j.HostKey, knownHosts: h.KnownHosts})
	if err != nil {
		return nil, fmt.Errorf("connecting to bastion: %w", err)
	}
	c, err := d.dial(ctx, jump, endpoint{addr: h.Addr(), user: h.User, key: h.Identity, keyFile: h.IdentityFile, hostKey: h.HostKey, knownHosts: h.KnownHosts})
	if err != nil {
		jump.Close()
		return nil, err
	}
	go func() { // the bastion's connection lives as long as the host's
		_ = c.Wait()
		jump.Close()
	}()
	return c, nil
}

type endpoint struct {
	addr, user, hostKey, knownHosts, keyFile string
	key                                      model.SecretRef
}

// privateKey reads e's key: its file (private to the server's user) or its
// secret.
func (d *Dialer) privateKey(ctx context.Context, e endpoint) ([]byte, string, error) {
	if e.keyFile != "" {
		st, err := os.Stat(e.keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading the private key for %s: %w", e.addr, err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, "", fmt.Errorf("private key file %s has mode %v: make it private with chmod 600 %s", e.keyFile, st.Mode().Perm(), e.keyFile)
		}
		b, err := os.ReadFile(e.keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading the private key for %s: %w", e.addr, err)
		}
		return b, "file " + e.keyFile, nil
	}
	if d.Keys == nil {
		return nil, "", fmt.Errorf("connecting to %s: the key is secret %s, but this server cannot open secrets for ssh pools", e.addr, e.key)
	}
	raw, err := d.Keys.OpenSecret(ctx, e.key)
	if err != nil {
		return nil, "", fmt.Errorf("opening the private key %s for %s: %w", e.key, e.addr, err)
	}
	return raw, "secret " + string(e.key), nil
}

func (d *Dialer) dial(ctx context.Context, via *ssh.Client, e endpoint) (*ssh.Client, error) {
	raw, from, err := d.privateKey(ctx, e)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is not an unencrypted private key (OpenSSH or PEM): %w", from, err)
	}
	check, err := hostKeyCallback(e)
	if err != nil {
		return nil, err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	cfg := &ssh.ClientConfig{User: e.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: check, Timeout: timeout}
	if e.hostKey != "" {
		if pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(e.hostKey)); err == nil {
			cfg.HostKeyAlgorithms = algorithmsFor(pk.Type())
		}
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	if via != nil {
		conn, err = via.DialContext(dctx, "tcp", e.addr)
	} else {
		conn, err = (&net.Dialer{}).DialContext(dctx, "tcp", e.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", e.addr, err)
	}
	// The handshake has no context: bound it by the deadline.
	if dl, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(conn, e.addr, cfg)
	stop()
	if err != nil {
		conn.Close()
		return nil, classify(e, from, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// classify turns handshake failures into ErrHostKey or ErrAuth with a
// message that says what to fix.
func classify(e endpoint, from string, err error) error {
	if errors.Is(err, ErrHostKey) {
		return err
	}
	if strings.Contains(err.Error(), "unable to authenticate") {
		return fmt.Errorf("logging in to %s as %s with the key in %s: %w (is its public key in ~%s/.ssh/authorized_keys?): %v", e.addr, e.user, from, ErrAuth, e.user, err)
	}
	return fmt.Errorf("ssh handshake with %s: %w", e.addr, err)
}

// hostKeyCallback checks the host's key against the pinned key, else the
// known_hosts file; with neither it refuses (validation requires one).
func hostKeyCallback(e endpoint) (ssh.HostKeyCallback, error) {
	if e.hostKey != "" {
		want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(e.hostKey))
		if err != nil {
			return nil, fmt.Errorf("the pinned host key of %s does not parse: %w", e.addr, err)
		}
		return func(_ string, _ net.Addr, got ssh.PublicKey) error {
			if got.Type() == want.Type() && string(got.Marshal()) == string(want.Marshal()) {
				return nil
			}
			return fmt.Errorf("%s presented %s key %s, but the pool pins %s %s: %w (if the host was reinstalled, check and update hostKey)",
				e.addr, got.Type(), ssh.FingerprintSHA256(got), want.Type(), ssh.FingerprintSHA256(want), ErrHostKey)
		}, nil
	}
	if e.knownHosts == "" {
		return nil, fmt.Errorf("connecting to %s: no hostKey and no knownHostsFile to check its key: %w", e.addr, ErrHostKey)
	}
	kh, err := knownhosts.New(e.knownHosts)
	if err != nil {
		return nil, fmt.Errorf("reading known hosts %s: %w", e.knownHosts, err)
	}
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := kh(host, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			return fmt.Errorf("%s presented a revoked key %s: %w", host, ssh.FingerprintSHA256(key), ErrHostKey)
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return fmt.Errorf("%s is not in %s (its %s key is %s; add it with ssh-keyscan after checking the fingerprint): %w", host, e.knownHosts, key.Type(), ssh.FingerprintSHA256(key), ErrHostKey)
		case errors.As(err, &ke):
			return fmt.Errorf("%s presented %s key %s, which does not match its entry in %s line %d: %w", host, key.Type(), ssh.FingerprintSHA256(key), ke.Want[0].Filename, ke.Want[0].Line, ErrHostKey)
		}
		return fmt.Errorf("checking the host key of %s: %w: %w", host, ErrHostKey, err)
	}, nil
}

// algorithmsFor makes the server present the pinned key's type, not
// another of its keys.
func algorithmsFor(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}
