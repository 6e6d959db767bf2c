package ssh

import (
	"fmt"
	"net"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Defaults for what a pool leaves out.
const (
	DefaultUser       = "root"
	DefaultPort       = 22
	DefaultInstallDir = "/var/lib/gpufleet-ssh"
	// Region is the region of a host that declares none.
	Region = "owned"
)

// Host is one host of an SSH pool with the pool's defaults applied:
// everything needed to reach it and install the agent there.
type Host struct {
	Pool string `json:"pool"`
	// Name is the node id.
	Name     string          `json:"name"`
	Address  string          `json:"address"`
	Port     int             `json:"port"`
	User     string          `json:"user"`
	Identity model.SecretRef `json:"identityRef,omitempty"`
	// IdentityFile, when set, is the key file on the server used
	// instead of Identity.
	IdentityFile string `json:"identityFile,omitempty"`
	HostKey      string `json:"hostKey,omitempty"`
	KnownHosts   string `json:"knownHostsFile,omitempty"`
	Jump         *Jump  `json:"proxyJump,omitempty"`
	InstallDir   string `json:"installDir"`

	PricePerHour float64 `json:"pricePerHour,omitempty"`
	Region       string  `json:"region"`
	Zone         string  `json:"zone,omitempty"`
}

// Jump is a resolved bastion.
type Jump struct {
	Address      string          `json:"address"`
	Port         int             `json:"port"`
	User         string          `json:"user"`
	Identity     model.SecretRef `json:"identityRef,omitempty"`
	IdentityFile string          `json:"identityFile,omitempty"`
	HostKey      string          `json:"hostKey,omitempty"`
}

// Addr is host:port.
func (h Host) Addr() string { return net.JoinHostPort(h.Address, strconv.Itoa(h.Port)) }

// Dir is the folder on the host that holds all of this node's files.
func (h Host) Dir() string { return h.InstallDir + "/" + h.Name }

// Unit is the name of the node's systemd unit.
func (h Host) Unit() string { return "gpufleet-agent-" + h.Name + ".service" }

func (h Host) String() string { return fmt.Sprintf("%s@%s (node %s)", h.User, h.Addr(), h.Name) }

// Hosts resolves the hosts of the ssh pools among pools, in pool then host
// order; a node name listed twice counts once, in its first pool. Pools
// that are not ssh pools are skipped.
func Hosts(pools []*model.NodePool) []Host {
	var out []Host
	seen := map[string]bool{}
	for _, p := range pools {
		if p.Spec.Provider != model.ProviderSSH || p.Spec.SSH == nil {
			continue
		}
		s := p.Spec.SSH
		for _, h := range s.Hosts {
			if seen[h.Name] {
				continue
			}
			seen[h.Name] = true
			out = append(out, resolve(p.Name, s, h))
		}
	}
	return out
}

func resolve(pool string, s *model.SSHPoolSettings, h model.SSHHost) Host {
	r := Host{
		Pool: pool, Name: h.Name, Address: h.Address,
		Port: first(h.Port, s.Port, DefaultPort), User: first(h.User, s.User, DefaultUser),
		HostKey: h.HostKey, KnownHosts: s.KnownHostsFile,
		InstallDir: first(s.InstallDir, DefaultInstallDir), PricePerHour: h.PricePerHour,
		Region: first(h.Region, Region), Zone: h.Zone,
	}
	// A host's own key wins over the pool's, whichever form each has.
	if h.IdentityRef != "" || h.IdentityFile != "" {
		r.Identity, r.IdentityFile = h.IdentityRef, h.IdentityFile
	} else {
		r.Identity, r.IdentityFile = s.IdentityRef, s.IdentityFile
	}
	if j := first(h.ProxyJump, s.ProxyJump); j != nil {
		r.Jump = &Jump{Address: j.Address, Port: first(j.Port, DefaultPort), User: first(j.User, r.User), HostKey: j.HostKey}
		if j.IdentityRef != "" {
			r.Jump.Identity = j.IdentityRef
		} else {
			r.Jump.Identity, r.Jump.IdentityFile = r.Identity, r.IdentityFile
		}
	}
	return r
}

// first returns the first of vs that is not the zero value.
func first[T comparable](vs ...T) T {
	var zero T
	for _, v := range vs {
		if v != zero {
			return v
		}
	}
	return zero
}
