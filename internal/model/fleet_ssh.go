package model

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
