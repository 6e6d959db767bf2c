package model

// ProviderAWS is the pool provider of EC2 instances gpufleet launches
// (docs/aws.md).
const ProviderAWS = "aws"

// AWSPoolSettings are a pool's `aws` block: where and how its instances
// launch. Zero optional fields take the defaults noted. The EC2 driver
// (internal/provider/aws) reads them as its Settings.
type AWSPoolSettings struct {
	// Region is the EC2 region, e.g. us-east-1. Required.
	Region string `json:"region"`
	// Subnets are the subnet ids instances launch into, one per zone at
	// most; offers are listed only in these subnets' zones. Required.
	Subnets []string `json:"subnets"`
	// SecurityGroups are security group ids set on every instance.
	// Required: instances need at least outbound HTTPS to the server.
	SecurityGroups []string `json:"securityGroups"`
	// AMI is the image id, e.g. a Deep Learning AMI with the NVIDIA driver.
	// Required.
	AMI string `json:"ami"`
	// KeyName is an EC2 key pair for SSH; empty launches without one.
	KeyName string `json:"keyName,omitempty"`
	// InstanceProfile is the IAM instance profile (name or ARN) the
	// instances run as; needed when Bootstrap.BinaryS3 is set.
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// RootVolumeGiB sizes the root EBS volume (gp3); 0 keeps the AMI's.
	RootVolumeGiB int `json:"rootVolumeGiB,omitempty"`
	// AnyZone lets a spot launch go to any zone of the pool's subnets,
	// chosen by EC2's price-capacity-optimized strategy, rather than the
	// offer's zone only; the instance reports the zone it got.
	AnyZone bool `json:"anyZone,omitempty"`
	// Endpoint overrides the EC2 endpoint (a VPC endpoint, or a test
	// server); empty uses the region's public endpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// Bootstrap says how an instance gets gpufleet and finds the server.
	Bootstrap AWSBootstrap `json:"bootstrap"`
}

// AWSBootstrap is what the user-data of an instance needs.
type AWSBootstrap struct {
	// Server is the URL agents reach the server at. Required.
	Server string `json:"server"`
	// BinaryURL (https) or BinaryS3 (s3://bucket/key) is where the gpufleet
	// binary of this server's version is fetched from; exactly one is set.
	BinaryURL string `json:"binaryURL,omitempty"`
	BinaryS3  string `json:"binaryS3,omitempty"`
	// SHA256 is the binary's hex digest; the instance refuses another.
	// Required.
	SHA256 string `json:"sha256"`
	// ServerCA is the PEM certificate the agent pins for an https Server;
	// empty trusts the system roots.
	ServerCA string `json:"serverCA,omitempty"`
}
