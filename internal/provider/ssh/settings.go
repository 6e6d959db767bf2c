package ssh

import (
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"path"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// CheckPool is the ssh driver's check of a pool (registry.Driver.Check):
// min and max default to the number of hosts, the pool needs its ssh
// block, valid, with field paths under prefix (spec.ssh.hosts[2].address),
// and max is at most the hosts listed.
func CheckPool(spec *model.NodePoolSpec, prefix string, _ func(string) bool) model.FieldErrors {
	if spec.SSH == nil {
		return model.FieldErrors{{Path: prefix + ".ssh.hosts", Message: "an ssh pool lists at least one host"}}
	}
	if spec.Min == 0 && spec.Max == 0 {
		spec.Min, spec.Max = len(spec.SSH.Hosts), len(spec.SSH.Hosts)
	}
	fe := ValidateSettings(spec.SSH, prefix+".ssh")
	if spec.Max > len(spec.SSH.Hosts) {
		fe.Add(prefix+".max", fmt.Sprintf("must be at most the %d hosts listed", len(spec.SSH.Hosts)))
	}
	return fe
}

// ValidateSettings reports every problem in a pool's ssh block s, with paths under prefix (usually
// "spec.ssh"): hosts[2].address and the like.
func ValidateSettings(s *model.SSHPoolSettings, prefix string) model.FieldErrors {
	var fe model.FieldErrors
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
		validateJump(s.ProxyJump, &fe, p("proxyJump"), s.KnownHostsFile != "")
	}
	if len(s.Hosts) == 0 {
		fe.Add(p("hosts"), "an ssh pool lists at least one host")
	}
	seen := map[string]int{}
	for i, h := range s.Hosts {
		hp := fmt.Sprintf("%s[%d]", p("hosts"), i)
		switch j, dup := seen[h.Name]; {
		case !model.ValidName(h.Name):
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
			validateJump(h.ProxyJump, &fe, hp+".proxyJump", s.KnownHostsFile != "")
		}
		if math.IsNaN(h.PricePerHour) || math.IsInf(h.PricePerHour, 0) || h.PricePerHour < 0 {
			fe.Add(hp+".pricePerHour", "must be a non-negative number of USD per hour")
		}
		if h.Region != "" && !model.ValidName(h.Region) {
			fe.Add(hp+".region", "must be lower-case letters, digits and dashes (at most 63)")
		}
	}
	return fe
}

func validateJump(j *model.SSHJump, fe *model.FieldErrors, prefix string, knownHosts bool) {
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

func checkIdentity(fe *model.FieldErrors, p func(string) string, ref model.SecretRef, file string) {
	if ref != "" && file != "" {
		fe.Add(p("identityFile"), "names a key file, but identityRef names a secret: give one")
	}
	if file != "" && !path.IsAbs(file) {
		fe.Add(p("identityFile"), fmt.Sprintf("%q must be an absolute path on the server", file))
	}
}

func checkAddress(fe *model.FieldErrors, p, addr string) {
	switch {
	case strings.TrimSpace(addr) == "":
		fe.Add(p, "is required: the host name or IP gpufleet connects to")
	case strings.ContainsAny(addr, " /@:") && net.ParseIP(addr) == nil:
		fe.Add(p, fmt.Sprintf("%q must be a host name or IP address (user and port have fields of their own)", addr))
	}
}

func checkUser(fe *model.FieldErrors, p, user string) {
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

func checkPort(fe *model.FieldErrors, p string, port int) {
	if port < 0 || port > 65535 {
		fe.Add(p, "must be between 1 and 65535 (0: 22)")
	}
}

func checkRef(fe *model.FieldErrors, p string, ref model.SecretRef) {
	if ref == "" {
		return
	}
	if msg := ref.Validate(); msg != "" {
		fe.Add(p, msg)
	}
}

// checkHostKey checks the shape of a pinned key ("TYPE BASE64 [comment]");
// the ssh provider parses it fully.
func checkHostKey(fe *model.FieldErrors, p, key string) {
	f := strings.Fields(key)
	if len(f) < 2 {
		fe.Add(p, "must be \"TYPE BASE64\", e.g. a line of `ssh-keyscan HOST` without the host name")
		return
	}
	if _, err := base64.StdEncoding.DecodeString(f[1]); err != nil {
		fe.Add(p, fmt.Sprintf("key %.16q… is not base64", f[1]))
	}
}
