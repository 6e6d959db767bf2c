package ssh

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestValidateSettings(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvRTl0h8yLZh5cEM7Ctp6yI0eQ3Vmf5W9b6f1m8Z0Ux"
	ok := func() *model.SSHPoolSettings {
		return &model.SSHPoolSettings{IdentityRef: "ops/SSH_KEY", Hosts: []model.SSHHost{
			{Name: "a", Address: "10.0.0.1", HostKey: key},
			{Name: "b", Address: "gpu-b.lab", HostKey: key, Port: 2222, User: "ubuntu"},
		}}
	}
	tests := map[string]struct {
		edit func(*model.SSHPoolSettings)
		want []string // paths
	}{
		"valid": {edit: func(*model.SSHPoolSettings) {}},
		"valid with known hosts and a bastion": {edit: func(s *model.SSHPoolSettings) {
			s.KnownHostsFile = "/etc/gpufleet/known_hosts"
			s.Hosts[0].HostKey = ""
			s.ProxyJump = &model.SSHJump{Address: "bastion.lab"}
		}},
		"no hosts": {edit: func(s *model.SSHPoolSettings) { s.Hosts = nil }, want: []string{"spec.ssh.hosts"}},
		"bad host fields": {edit: func(s *model.SSHPoolSettings) {
			s.Hosts = append(s.Hosts, model.SSHHost{Name: "a", Address: "root@x:22", Port: 70000, User: "a b", HostKey: "nonsense", PricePerHour: -1})
		}, want: []string{"spec.ssh.hosts[2].address", "spec.ssh.hosts[2].hostKey", "spec.ssh.hosts[2].name", "spec.ssh.hosts[2].port", "spec.ssh.hosts[2].pricePerHour", "spec.ssh.hosts[2].user"}},
		"no key anywhere": {edit: func(s *model.SSHPoolSettings) { s.IdentityRef = "" },
			want: []string{"spec.ssh.hosts[0].identityRef", "spec.ssh.hosts[1].identityRef"}},
		"both key forms":    {edit: func(s *model.SSHPoolSettings) { s.IdentityFile = "/k" }, want: []string{"spec.ssh.identityFile"}},
		"relative key file": {edit: func(s *model.SSHPoolSettings) { s.Hosts[1].IdentityFile = "id_ed25519" }, want: []string{"spec.ssh.hosts[1].identityFile"}},
		"bad ref":           {edit: func(s *model.SSHPoolSettings) { s.IdentityRef = "nokey" }, want: []string{"spec.ssh.identityRef"}},
		"no blind trust": {edit: func(s *model.SSHPoolSettings) {
			s.Hosts[1].HostKey = ""
			s.Hosts[0].ProxyJump = &model.SSHJump{Address: "bastion"}
		}, want: []string{"spec.ssh.hosts[0].proxyJump.hostKey", "spec.ssh.hosts[1].hostKey"}},
		"bad folders": {edit: func(s *model.SSHPoolSettings) { s.InstallDir = "/"; s.KnownHostsFile = "known_hosts" },
			want: []string{"spec.ssh.installDir", "spec.ssh.knownHostsFile"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := ok()
			tc.edit(s)
			var got []string
			for _, e := range ValidateSettings(s, "spec.ssh") {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problem paths (-want +got):\n%s\n%v", diff, ValidateSettings(s, "spec.ssh"))
			}
		})
	}
}

// TestCheckPool: an ssh pool's min and max default to its hosts; it
// needs its block; max is at most the hosts.
func TestCheckPool(t *testing.T) {
	spec := model.NodePoolSpec{Provider: Name, SSH: &model.SSHPoolSettings{IdentityFile: "/k", Hosts: []model.SSHHost{{Name: "a", Address: "h", HostKey: "ssh-ed25519 AAAA"}}}}
	if fe := CheckPool(&spec, "spec", nil); len(fe) > 0 || spec.Min != 1 || spec.Max != 1 {
		t.Errorf("CheckPool: %v; min, max = %d, %d; want no problems and the host count", fe, spec.Min, spec.Max)
	}
	spec.Max = 2
	if fe := CheckPool(&spec, "spec", nil); len(fe) != 1 || fe[0].Path != "spec.max" {
		t.Errorf("max above the hosts: %v", fe)
	}
	spec.SSH = nil
	if fe := CheckPool(&spec, "spec", nil); len(fe) != 1 || fe[0].Path != "spec.ssh.hosts" {
		t.Errorf("an ssh pool without its block: %v", fe)
	}
}
