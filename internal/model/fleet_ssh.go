package model

import (
	"encoding/base64"
	"fmt"
	"net"
	"path"
	"strings"
)

// ProviderSSH is the pool provider of owned machines gpufleet reaches over
// SSH and installs its agent on (docs/ssh-fleets.md).
const ProviderSSH = "ssh"

// SSHPoolSettings declare an SSH fleet: hosts gpufleet logs in to, probes,
// and runs `gpufleet agent` on. Host fields left empty take the pool's.
// There is no blind trust: every host's key is either pinned (hostKey) or
// found in the pool's knownHostsFile.
type SSHPoolSettings struct {
	// User logs in on every host that names none (default root). A user
	// other than root needs passwordless sudo.
	User string `json:"user,omitempty"`
	// Port is sshd's port on every host that names none (default 22).
	Port int `json:"port,omitempty"`
	// IdentityRef is the sealed secret ("project/NAME") holding the
	// private key (OpenSSH or PEM) gpufleet logs in with, for every host
	// that names none.
	IdentityRef SecretRef `json:"identityRef,omitempty"`
	// IdentityFile, instead of IdentityRef, is a private key file on the
	// server (mode 0600), as a kubernetes pool names its kubeconfig.
	IdentityFile string `json:"identityFile,omitempty"`
	// KnownHostsFile is a known_hosts file on the server that vouches for
	// the hosts' keys (hashed entries and @revoked work); a host with a
	// hostKey is checked against that instead.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
	// ProxyJump, when set, is the bastion every host without its own is
	// reached through.
	ProxyJump *SSHJump `json:"proxyJump,omitempty"`
	// InstallDir is the folder on each host under which gpufleet puts the
	// agent's binary, token and data, one folder per node (default
	// /var/lib/gpufleet-ssh). Everything under <installDir>/<name> goes
	// when the host leaves the pool.
	InstallDir string `json:"installDir,omitempty"`
	// Hosts are the machines, one node each.
	Hosts []SSHHost `json:"hosts"`
}

// SSHHost is one machine of an SSH fleet.
type SSHHost struct {
	// Name is the node id its agent registers as (lower-case letters,
	// digits and dashes, at most 63).
	Name string `json:"name"`
	// Address is the host name or IP gpufleet connects to.
	Address string `json:"address"`
	User    string `json:"user,omitempty"`
	Port    int    `json:"port,omitempty"`
	// IdentityRef or IdentityFile overrides the pool's key for this
	// host.
	IdentityRef  SecretRef `json:"identityRef,omitempty"`
	IdentityFile string    `json:"identityFile,omitempty"`
	// HostKey pins the host's public key, as a line of known_hosts or
	// authorized_keys form without the host: "ssh-ed25519 AAAA…".
	HostKey   string   `json:"hostKey,omitempty"`
	ProxyJump *SSHJump `json:"proxyJump,omitempty"`
	// PricePerHour is the machine's amortised cost in USD per hour.
	PricePerHour float64 `json:"pricePerHour,omitempty"`
	// Region and Zone place it for region policies (default region
	// "owned").
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// SSHJump is a bastion host (ssh -J).
type SSHJump struct {
	Address string `json:"address"`
	User    string `json:"user,omitempty"`
	Port    int    `json:"port,omitempty"`
	// IdentityRef defaults to the key of the host reached through it.
	IdentityRef SecretRef `json:"identityRef,omitempty"`
	// HostKey pins the bastion's key; without it the pool's
	// knownHostsFile must vouch for it.
	HostKey string `json:"hostKey,omitempty"`
}

// Validate reports every problem in s, with paths under prefix (usually
// "spec.ssh"): hosts[2].address and the like.
func (s *SSHPoolSettings) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	p := func(f string) string { return prefix + "." + f }
	checkUser(&fe, p("user"), s.User)
	checkPort(&fe, p("port"), s.Port)
	checkRef(&fe, p("identityRef"), s.IdentityRef)
	checkIdentity(&fe, p, s.IdentityRef, s.IdentityFile)
	if s.KnownHostsFile != "" && !path.IsAbs(s.KnownHostsFile) {
		fe.Add(p("knownHostsFile"), fmt.Sprintf("%q must be an absolute path on the server", s.KnownHostsFile))
	}
	if s.InstallDir != "" && (!path.IsAbs(s.InstallDir) || path.Clean(s.InstallDir) == "/" || strings.ContainsAny(s.InstallDir, "'\"\\$` \n")) {
		fe.Add(p("installDir"), fmt.Sprintf("%q must be an absolute folder other than / without quotes, spaces or $", s.InstallDir))
	}
	if s.ProxyJump != nil {
		s.ProxyJump.validate(&fe, p("proxyJump"), s.KnownHostsFile != "")
	}
	if len(s.Hosts) == 0 {
		fe.Add(p("hosts"), "an ssh pool lists at least one host")
	}
	seen := map[string]int{}
	for i, h := range s.Hosts {
		hp := fmt.Sprintf("%s[%d]", p("hosts"), i)
		switch j, dup := seen[h.Name]; {
		case !ValidName(h.Name):
			fe.Add(hp+".name", "must be lower-case letters, digits and dashes (at most 63): the node id its agent registers as")
		case dup:
			fe.Add(hp+".name", fmt.Sprintf("%q is also host %d", h.Name, j))
		default:
			seen[h.Name] = i
		}
		checkAddress(&fe, hp+".address", h.Address)
		checkUser(&fe, hp+".user", h.User)
		checkPort(&fe, hp+".port", h.Port)
		checkRef(&fe, hp+".identityRef", h.IdentityRef)
		checkIdentity(&fe, func(f string) string { return hp + "." + f }, h.IdentityRef, h.IdentityFile)
		if h.IdentityRef == "" && h.IdentityFile == "" && s.IdentityRef == "" && s.IdentityFile == "" {
			fe.Add(hp+".identityRef", "is required here or as the pool's identityRef: the secret (project/NAME) holding the private key (or identityFile, a key file on the server)")
		}
		switch {
		case h.HostKey != "":
			checkHostKey(&fe, hp+".hostKey", h.HostKey)
		case s.KnownHostsFile == "":
			fe.Add(hp+".hostKey", "is required when the pool has no knownHostsFile: gpufleet never trusts a host key it cannot check (ssh-keyscan, then verify the fingerprint)")
		}
		if h.ProxyJump != nil {
			h.ProxyJump.validate(&fe, hp+".proxyJump", s.KnownHostsFile != "")
		}
		if bad(h.PricePerHour) || h.PricePerHour < 0 {
			fe.Add(hp+".pricePerHour", "must be a non-negative number of USD per hour")
		}
		if h.Region != "" && !ValidName(h.Region) {
			fe.Add(hp+".region", "must be lower-case letters, digits and dashes (at most 63)")
		}
	}
	return fe
}

func (j *SSHJump) validate(fe *FieldErrors, prefix string, knownHosts bool) {
	checkAddress(fe, prefix+".address", j.Address)
	checkUser(fe, prefix+".user", j.User)
	checkPort(fe, prefix+".port", j.Port)
	checkRef(fe, prefix+".identityRef", j.IdentityRef)
	switch {
	case j.HostKey != "":
		checkHostKey(fe, prefix+".hostKey", j.HostKey)
	case !knownHosts:
		fe.Add(prefix+".hostKey", "is required when the pool has no knownHostsFile")
	}
}

func checkIdentity(fe *FieldErrors, p func(string) string, ref SecretRef, file string) {
	if ref != "" && file != "" {
		fe.Add(p("identityFile"), "names a key file, but identityRef names a secret: give one")
	}
	if file != "" && !path.IsAbs(file) {
		fe.Add(p("identityFile"), fmt.Sprintf("%q must be an absolute path on the server", file))
	}
}

func checkAddress(fe *FieldErrors, p, addr string) {
	switch {
	case strings.TrimSpace(addr) == "":
		fe.Add(p, "is required: the host name or IP gpufleet connects to")
	case strings.ContainsAny(addr, " /@:") && net.ParseIP(addr) == nil:
		fe.Add(p, fmt.Sprintf("%q must be a host name or IP address (user and port have fields of their own)", addr))
	}
}

func checkUser(fe *FieldErrors, p, user string) {
	if user == "" {
		return
	}
	for _, r := range user {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			fe.Add(p, fmt.Sprintf("%q is not a user name", user))
			return
		}
	}
}

func checkPort(fe *FieldErrors, p string, port int) {
	if port < 0 || port > 65535 {
		fe.Add(p, "must be between 1 and 65535 (0: 22)")
	}
}

func checkRef(fe *FieldErrors, p string, ref SecretRef) {
	if ref == "" {
		return
	}
	if msg := ref.Validate(); msg != "" {
		fe.Add(p, msg)
	}
}

// checkHostKey checks the shape of a pinned key ("TYPE BASE64 [comment]");
// the ssh provider parses it fully.
func checkHostKey(fe *FieldErrors, p, key string) {
	f := strings.Fields(key)
	if len(f) < 2 {
		fe.Add(p, "must be \"TYPE BASE64\", e.g. a line of `ssh-keyscan HOST` without the host name")
		return
	}
	if _, err := base64.StdEncoding.DecodeString(f[1]); err != nil {
		fe.Add(p, fmt.Sprintf("key %.16q… is not base64", f[1]))
	}
}
