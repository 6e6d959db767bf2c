package model

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAWSPoolSpec(t *testing.T) {
	aws := &AWSPoolSettings{Region: "us-east-1", Subnets: []string{"subnet-0a1b2c3d4e5f60001"}, SecurityGroups: []string{"sg-0a1b2c3d4e5f60001"},
		AMI: "ami-0a1b2c3d4e5f60001", Bootstrap: AWSBootstrap{Server: "https://fleet.example:7777", BinaryURL: "https://dl.example/gpufleet", SHA256: strings.Repeat("ab", 32)}}
	spec := NodePoolSpec{Provider: ProviderAWS, AWS: aws, Max: 4}
	spec.Default()
	if fe := spec.Validate("spec", nil); len(fe) > 0 {
		t.Errorf("Validate: %v", fe)
	}
	spec.AWS = &AWSPoolSettings{Region: "us-east-1", Subnets: []string{"subnet-x"}, SecurityGroups: aws.SecurityGroups, AMI: aws.AMI, Bootstrap: aws.Bootstrap}
	var got []string
	for _, e := range spec.Validate("spec", nil) {
		got = append(got, e.Path)
	}
	if diff := cmp.Diff([]string{"spec.aws.subnets[0]"}, got); diff != "" {
		t.Errorf("a bad subnet's paths (-want +got):\n%s", diff)
	}
	spec.AWS = nil
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.aws" {
		t.Errorf("an aws pool without its block: %v", fe)
	}
	spec = NodePoolSpec{Provider: ProviderSim, AWS: aws, Max: 1}
	if fe := spec.Validate("spec", nil); len(fe) != 1 || fe[0].Path != "spec.aws" {
		t.Errorf("an aws block on a sim pool: %v", fe)
	}
}
