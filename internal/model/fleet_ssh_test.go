package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSSHPoolSettingsValidate(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvRTl0h8yLZh5cEM7Ctp6yI0eQ3Vmf5W9b6f1m8Z0Ux"
	ok := func() *SSHPoolSettings {
		return &SSHPoolSettings{IdentityRef: "ops/SSH_KEY", Hosts: []SSHHost{
			{Name: "a", Address: "10.0.0.1", HostKey: key},
			{Name: "b", Address: "gpu-b.lab", HostKey: key, Port: 2222, User: "ubuntu"},
		}}
	}
	tests := map[string]struct {
		edit func(*SSHPoolSettings)
		want []string // paths
	}{
		"valid": {edit: func(*SSHPoolSettings) {}},
		"valid with known hosts and a bastion": {edit: func(s *SSHPoolSettings) {
			s.KnownHostsFile = "/etc/gpufleet/known_hosts"
			s.Hosts[0].HostKey = ""
			s.ProxyJump = &SSHJump{Address: "bastion.lab"}
		}},
		"no hosts": {edit: func(s *SSHPoolSettings) { s.Hosts = nil }, want: []string{"spec.ssh.hosts"}},
		"bad host fields": {edit: func(s *SSHPoolSettings) {
			s.Hosts = append(s.Hosts, SSHHost{Name: "a", Address: "root@x:22", Port: 70000, User: "a b", HostKey: "nonsense", PricePerHour: -1})
		}, want: []string{"spec.ssh.hosts[2].address", "spec.ssh.hosts[2].hostKey", "spec.ssh.hosts[2].name", "spec.ssh.hosts[2].port", "spec.ssh.hosts[2].pricePerHour", "spec.ssh.hosts[2].user"}},
		"no key anywhere": {edit: func(s *SSHPoolSettings) { s.IdentityRef = "" },
			want: []string{"spec.ssh.hosts[0].identityRef", "spec.ssh.hosts[1].identityRef"}},
		"both key forms":    {edit: func(s *SSHPoolSettings) { s.IdentityFile = "/k" }, want: []string{"spec.ssh.identityFile"}},
		"relative key file": {edit: func(s *SSHPoolSettings) { s.Hosts[1].IdentityFile = "id_ed25519" }, want: []string{"spec.ssh.hosts[1].identityFile"}},
		"bad ref":           {edit: func(s *SSHPoolSettings) { s.IdentityRef = "nokey" }, want: []string{"spec.ssh.identityRef"}},
		"no blind trust": {edit: func(s *SSHPoolSettings) {
			s.Hosts[1].HostKey = ""
			s.Hosts[0].ProxyJump = &SSHJump{Address: "bastion"}
		}, want: []string{"spec.ssh.hosts[0].proxyJump.hostKey", "spec.ssh.hosts[1].hostKey"}},
		"bad folders": {edit: func(s *SSHPoolSettings) { s.InstallDir = "/"; s.KnownHostsFile = "known_hosts" },
			want: []string{"spec.ssh.installDir", "spec.ssh.knownHostsFile"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := ok()
			tc.edit(s)
			var got []string
			for _, e := range s.Validate("spec.ssh") {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problem paths (-want +got):\n%s\n%v", diff, s.Validate("spec.ssh"))
			}
		})
	}
}

func TestSSHPoolSpec(t *testing.T) {
	spec := NodePoolSpec{Provider: ProviderSSH, SSH: &SSHPoolSettings{IdentityFile: "/k", Hosts: []SSHHost{{Name: "a", Address: "h", HostKey: "ssh-ed25519 AAAA"}}}}
	spec.Default()
	if spec.Min != 1 || spec.Max != 1 {
		t.Errorf("min, max = %d, %d; want the host count", spec.Min, spec.Max)
	}
	if fe := spec.Validate("spec", nil); len(fe) > 0 {
		t.Errorf("Validate: %v", fe)
	}
	spec.SSH = nil
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.ssh.hosts" {
		t.Errorf("an ssh pool without its block: %v", fe)
	}
	spec = NodePoolSpec{Provider: ProviderStatic, SSH: &SSHPoolSettings{}, Static: &StaticPoolSettings{Machines: []StaticMachine{{Name: "a", Address: "h", GPUs: "1xH100"}}}}
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.ssh" {
		t.Errorf("an ssh block on a static pool: %v", fe)
	}
}
