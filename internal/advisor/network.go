package advisor

import "path"

// networkRules give an instance's network bandwidth for multi-node jobs, in
// Gbit/s, by provider and instance-type pattern (path.Match syntax); the
// first match wins. The catalog carries no network figures, so these come
// from the providers' instance pages:
//   - AWS: p4d/p4de 400 Gbps EFA; p5/p5e/p5en/p6 3200 Gbps EFA; p3dn 100;
//     g5/g6 up to 100 on the largest sizes (aws.amazon.com/ec2/instance-types).
//   - GCP: a2 100 Gbps; a3-highgpu 1000 (GPUDirect-TCPX); a3-mega 1800
//     (TCPXO); a3-ultra and a4 3200 (RDMA) (cloud.google.com/compute/docs/gpus).
//   - Azure: ND A100 v4 1600 Gbps and ND H100/H200 v5 3200 InfiniBand
//     (learn.microsoft.com, ND-series sizes).
//   - OCI: BM.GPU4.8/A100 1600 Gbps RDMA; BM.GPU.H100/H200/B200 3200
//     (oracle.com/cloud/compute/gpu).
//   - Lambda: 1-Click Clusters 3200 Gbps IB; on-demand instances are not
//     clustered, so 100.
//   - Vast: marketplace hosts without a fabric; 10.
var networkRules = []struct {
	provider, pattern string
	gbps              float64
}{
	{"aws", "p4d*", 400}, {"aws", "p5*", 3200}, {"aws", "p6*", 3200}, {"aws", "p3dn*", 100}, {"aws", "*.48xlarge", 100}, {"aws", "*", 25},
	{"gcp", "a2-*", 100}, {"gcp", "a3-highgpu*", 1000}, {"gcp", "a3-edgegpu*", 800}, {"gcp", "a3-mega*", 1800}, {"gcp", "a3-ultra*", 3200}, {"gcp", "a4*", 3200}, {"gcp", "*", 32},
	{"azure", "Standard_ND96a*", 1600}, {"azure", "Standard_ND96*", 3200}, {"azure", "*", 40},
	{"oci", "BM.GPU4*", 1600}, {"oci", "BM.GPU.A100*", 1600}, {"oci", "BM.GPU*", 3200}, {"oci", "*", 50},
	{"lambda", "*", 100},
	{"vast", "*", 10},
}

// networkGbps returns an instance type's network bandwidth in Gbit/s.
func networkGbps(provider, instanceType string) float64 {
	for _, r := range networkRules {
		if r.provider != provider {
			continue
		}
		if ok, _ := path.Match(r.pattern, instanceType); ok {
			return r.gbps
		}
	}
	return 25
}
