package model

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

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

var (
	regionRE   = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	subnetRE   = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	sgRE       = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	amiRE      = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	profileARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/.+$`)
)

// Validate returns every problem with s at once, each with its field path
// under prefix (spec.aws in a NodePool manifest: spec.aws.subnets[1]: …).
func (s AWSPoolSettings) Validate(prefix string) FieldErrors {
	var fe FieldErrors
	at := func(f string) string { return prefix + "." + f }
	if !regionRE.MatchString(s.Region) {
		fe.Add(at("region"), fmt.Sprintf("%q is not an AWS region such as us-east-1", s.Region))
	}
	if len(s.Subnets) == 0 {
		fe.Add(at("subnets"), "is required: at least one subnet id (subnet-…) to launch into")
	}
	seen := map[string]bool{}
	for i, id := range s.Subnets {
		switch {
		case !subnetRE.MatchString(id):
			fe.Add(fmt.Sprintf("%s[%d]", at("subnets"), i), fmt.Sprintf("%q is not a subnet id (subnet- and 8 or 17 hex digits)", id))
		case seen[id]:
			fe.Add(fmt.Sprintf("%s[%d]", at("subnets"), i), fmt.Sprintf("%s is listed twice", id))
		}
		seen[id] = true
	}
	if len(s.SecurityGroups) == 0 {
		fe.Add(at("securityGroups"), "is required: at least one security group id (sg-…)")
	}
	for i, id := range s.SecurityGroups {
		if !sgRE.MatchString(id) {
			fe.Add(fmt.Sprintf("%s[%d]", at("securityGroups"), i), fmt.Sprintf("%q is not a security group id (sg-…)", id))
		}
	}
	if !amiRE.MatchString(s.AMI) {
		fe.Add(at("ami"), fmt.Sprintf("%q is not an image id (ami-…)", s.AMI))
	}
	if strings.ContainsAny(s.KeyName, "\x00\n") || len(s.KeyName) > 255 {
		fe.Add(at("keyName"), "must be a key pair name of at most 255 characters on one line")
	}
	if p := s.InstanceProfile; p != "" && strings.HasPrefix(p, "arn:") && !profileARN.MatchString(p) {
		fe.Add(at("instanceProfile"), fmt.Sprintf("%q is not an instance profile ARN (arn:aws:iam::ACCOUNT:instance-profile/NAME)", p))
	}
	if s.RootVolumeGiB < 0 || s.RootVolumeGiB > 64*1024 {
		fe.Add(at("rootVolumeGiB"), "must be between 0 (the AMI's size) and 65536")
	}
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			fe.Add(at("endpoint"), fmt.Sprintf("%q is not an http(s) URL", s.Endpoint))
		}
	}
	fe = append(fe, s.Bootstrap.Validate(at("bootstrap"), s.InstanceProfile != "")...)
	return fe
}

// Validate returns every problem with b, with paths under prefix;
// hasProfile says whether the pool names an instance profile (binaryS3
// needs one).
func (b AWSBootstrap) Validate(prefix string, hasProfile bool) FieldErrors {
	var fe FieldErrors
	at := func(f string) string { return prefix + "." + f }
	if u, err := url.Parse(b.Server); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		fe.Add(at("server"), fmt.Sprintf("%q is not the server's http(s) URL", b.Server))
	}
	switch {
	case b.BinaryURL == "" && b.BinaryS3 == "":
		fe.Add(at("binaryURL"), "one of binaryURL or binaryS3 is required: where instances fetch the gpufleet binary")
	case b.BinaryURL != "" && b.BinaryS3 != "":
		fe.Add(at("binaryS3"), "set either binaryURL or binaryS3, not both")
	case b.BinaryURL != "":
		if u, err := url.Parse(b.BinaryURL); err != nil || u.Scheme != "https" || u.Host == "" {
			fe.Add(at("binaryURL"), fmt.Sprintf("%q is not an https URL", b.BinaryURL))
		}
	default:
		bucket, key, ok := SplitS3(b.BinaryS3)
		if !ok || bucket == "" || key == "" {
			fe.Add(at("binaryS3"), fmt.Sprintf("%q is not s3://BUCKET/KEY", b.BinaryS3))
		} else if !hasProfile {
			fe.Add(at("binaryS3"), "needs spec.aws.instanceProfile: the instance reads the object with its role")
		}
	}
	if !sha256RE.MatchString(b.SHA256) {
		fe.Add(at("sha256"), "must be the binary's SHA-256 as 64 lower-case hex digits")
	}
	if b.ServerCA != "" && !strings.Contains(b.ServerCA, "-----BEGIN CERTIFICATE-----") {
		fe.Add(at("serverCA"), "must be a PEM certificate")
	}
	return fe
}

// SplitS3 splits s3://bucket/key.
func SplitS3(s string) (bucket, key string, ok bool) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", false
	}
	bucket, key, ok = strings.Cut(rest, "/")
	return bucket, key, ok
}
