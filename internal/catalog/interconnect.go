package catalog

import "path"

// Interconnects between the GPUs of an instance, for InstanceType and
// model.Offer.
const (
	// InterconnectNVSwitch is an NVLink switch fabric: every GPU reaches
	// every other at full NVLink bandwidth (HGX boards, GB200/GB300 racks).
	InterconnectNVSwitch = "nvswitch"
	// InterconnectNVLink is direct NVLink without a switch: V100 hybrid
	// cube-mesh boards, bridged pairs, or a GH200's NVLink-C2C.
	InterconnectNVLink = "nvlink"
	// InterconnectPCIe means GPUs talk over PCIe only.
	InterconnectPCIe = "pcie"
	// InterconnectInfinityFabric is AMD's all-to-all GPU links (MI300X OAM).
	InterconnectInfinityFabric = "infinity-fabric"
	// InterconnectICI is a TPU slice's inter-chip interconnect.
	InterconnectICI = "ici"
)

// interconnectRules gives the GPU fabric by instance family; the first rule
// whose provider, instance-type pattern (path.Match syntax) and, if set, GPU
// match wins. A single-GPU size gets its family's fabric too: it names the
// part it carries (a p5.4xlarge holds an SXM H100), not a peer it lacks.
// Every instance type in the embedded data must match a rule; a test checks.
var interconnectRules = []struct{ provider, pattern, gpu, link string }{
	{"aws", "p3*", "", InterconnectNVLink}, // p3 and p3dn: V100 SXM2 cube-mesh
	{"aws", "p4d*", "", InterconnectNVSwitch},
	{"aws", "p5*", "", InterconnectNVSwitch},
	{"aws", "p6-*", "", InterconnectNVSwitch},
	{"aws", "g*", "", InterconnectPCIe}, // g4dn, g5, g5g, g6

	{"gcp", "a2-*", "", InterconnectNVSwitch},
	{"gcp", "a3-*", "", InterconnectNVSwitch},
	{"gcp", "a4-*", "", InterconnectNVSwitch},
	{"gcp", "g2-*", "", InterconnectPCIe},
	{"gcp", "n1-*", "V100", InterconnectNVLink}, // attached SXM2 V100s
	{"gcp", "n1-*", "", InterconnectPCIe},       // attached T4, P4, P100
	{"gcp", "TPU-VM", "", InterconnectICI},

	{"azure", "Standard_ND*", "MI300X", InterconnectInfinityFabric},
	{"azure", "Standard_ND96*", "", InterconnectNVSwitch}, // ND A100 v4, ND H100/H200 v5
	{"azure", "Standard_ND40rs_v2", "", InterconnectNVLink},
	// NC: V100, T4, A10 and A100 PCIe cards; NC H100 v5 carries H100 NVL
	// cards, but Azure does not document bridges between them.
	{"azure", "Standard_NC*", "", InterconnectPCIe},
	{"azure", "Standard_NV*", "", InterconnectPCIe},

	{"oci", "BM.GPU.MI*", "", InterconnectInfinityFabric},
	{"oci", "*.GPU3.*", "", InterconnectNVLink}, // V100 SXM2
	{"oci", "*.GPU2.*", "", InterconnectPCIe},   // P100
	{"oci", "*.GPU.A10.*", "", InterconnectPCIe},
	{"oci", "BM.GPU.L40S.*", "", InterconnectPCIe},
	{"oci", "BM.GPU.RTXPRO.*", "", InterconnectPCIe},
	{"oci", "BM.GPU*", "", InterconnectNVSwitch}, // A100, H100, H200, B200, B300, GB200, GB300

	{"lambda", "gpu_*_sxm*", "", InterconnectNVSwitch},
	{"lambda", "gpu_8x_a100", "", InterconnectNVSwitch}, // 40 GB SXM4
	{"lambda", "gpu_8x_v100*", "", InterconnectNVLink},
	{"lambda", "gpu_1x_gh200", "", InterconnectNVLink},
	{"lambda", "gpu_*", "", InterconnectPCIe},

	// Marketplace hosts vary; the offer name says SXM when the GPUs are.
	{"vast", "*SXM*", "", InterconnectNVSwitch},
	{"vast", "*", "", InterconnectPCIe},
}

// interconnect returns the GPU fabric of an instance type, or "" when no
// rule matches.
func interconnect(provider, instanceType, gpu string) string {
	for _, r := range interconnectRules {
		if r.provider != provider || (r.gpu != "" && r.gpu != gpu) {
			continue
		}
		// The patterns are constants, checked by the tests; a bad one only
		// fails to match.
		if ok, _ := path.Match(r.pattern, instanceType); ok {
			return r.link
		}
	}
	return ""
}
