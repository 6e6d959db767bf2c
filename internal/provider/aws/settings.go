package aws

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Settings are a pool's `aws` block (model.AWSPoolSettings, where the
// NodePool spec holds them); ValidateSettings checks them with field
// paths.
type Settings = model.AWSPoolSettings

// Bootstrap is what an instance's user-data needs (model.AWSBootstrap).
type Bootstrap = model.AWSBootstrap

// settingsPath is where the block sits in a NodePool manifest.
const settingsPath = "spec.aws"

// PoolPrice prices an aws pool for `gpufleet plan` (the registry's
// PoolPricer): its nodes cost what the catalog's aws offers cost.
func PoolPrice(model.NodePoolSpec) provider.PoolPrice {
	return provider.PoolPrice{Clouds: []string{Name}}
}

// CheckPool is the aws driver's check of a pool (registry.Driver.Check):
// the pool needs its aws block, valid, with field paths under prefix
// (spec.aws.subnets[1]: …).
func CheckPool(spec *model.NodePoolSpec, prefix string, _ func(string) bool) model.FieldErrors {
	if spec.AWS == nil {
		return model.FieldErrors{{Path: prefix + ".aws", Message: "an aws pool needs its aws block: region, subnets, securityGroups, ami and bootstrap"}}
	}
	return ValidateSettings(*spec.AWS, prefix+".aws")
}

var (
	regionRE   = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	subnetRE   = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	sgRE       = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	amiRE      = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	profileARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/.+$`)
)

// ValidateSettings returns every problem with a pool's aws block s at once, each with its field path
// under prefix (spec.aws in a NodePool manifest: spec.aws.subnets[1]: …).
func ValidateSettings(s Settings, prefix string) model.FieldErrors {
	var fe model.FieldErrors
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
	fe = append(fe, ValidateBootstrap(s.Bootstrap, at("bootstrap"), s.InstanceProfile != "")...)
	return fe
}

// ValidateBootstrap returns every problem with b, with paths under prefix;
// hasProfile says whether the pool names an instance profile (binaryS3
// needs one).
func ValidateBootstrap(b Bootstrap, prefix string, hasProfile bool) model.FieldErrors {
	var fe model.FieldErrors
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
		bucket, key, ok := splitS3(b.BinaryS3)
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

// splitS3 splits s3://bucket/key.
func splitS3(s string) (bucket, key string, ok bool) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", false
	}
	bucket, key, ok = strings.Cut(rest, "/")
	return bucket, key, ok
}
