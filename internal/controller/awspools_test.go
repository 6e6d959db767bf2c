package controller

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/aws"
	"github.com/gpufleet/gpufleet/internal/provider/aws/ec2test"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/store"
)

type stubJoins struct{}

func (stubJoins) JoinToken(context.Context, string, string) (string, error) { return "gfn_test", nil }

// TestTwoAWSPools: two aws pools (different subnets, so different zones)
// against one test EC2 server each launch their own instance, tagged with
// their pool; removing one terminates only the instance tagged with it.
func TestTwoAWSPools(t *testing.T) {
	ctx := context.Background()
	ec2 := ec2test.New(t)
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Driver{Name: aws.Name, New: func(p *model.NodePool) (provider.Provider, error) {
		return aws.New(ctx, *p.Spec.AWS, aws.Options{Cluster: "test", Pool: p.Name, Catalog: cat, JoinTokens: stubJoins{},
			Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")})
	}})
	if err != nil {
		t.Fatal(err)
	}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := openSQLite(t, filepath.Join(t.TempDir(), "gpufleet.db"))
	defer st.Close()
	c, err := New(ctx, Config{Store: st, Logs: logs, Clock: clock.NewFake(t0), CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		Scale: ScaleConfig{Drivers: reg, LaunchTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := func(name, subnet, typ string) *model.NodePool {
		return &model.NodePool{Name: name, Spec: model.NodePoolSpec{Provider: aws.Name, Min: 1, Max: 1, InstanceTypes: []string{typ},
			AWS: &model.AWSPoolSettings{Region: "us-east-1", Subnets: []string{subnet}, SecurityGroups: []string{"sg-0123456789abcdef0"},
				AMI: "ami-0123456789abcdef0", Endpoint: ec2.URL(), Bootstrap: model.AWSBootstrap{Server: "https://fleet.example",
					BinaryURL: "https://dl.example/gpufleet", SHA256: strings.Repeat("ab", 32)}}}}
	}
	pools := []*model.NodePool{pool("a10g", "subnet-0a1b2c3d4e5f60001", "g5.xlarge"), pool("l4", "subnet-0a1b2c3d4e5f60002", "g5.xlarge")}
	c.mu.Lock()
	c.fleet.pools = pools
	c.mu.Unlock()
	for range 2 {
		c.scaleWait(ctx)
	}
	a, l := ec2.Tagged(aws.TagPool, "a10g"), ec2.Tagged(aws.TagPool, "l4")
	if len(a) != 1 || a[0].InstanceType != "g5.xlarge" || len(l) != 1 || l[0].ZoneID != "use1-az1" {
		t.Fatalf("instances by pool tag: a10g %+v, l4 %+v; want one each, l4 in its subnet's zone use1-az1", a, l)
	}
	for _, n := range c.Nodes() {
		if n.State == model.NodeTerminated {
			t.Fatalf("node %s of pool %s terminated: %+v", n.ID, n.Pool, c.Events(EventFilter{}))
		}
	}
	c.mu.Lock()
	c.retirePoolsLocked(&store.Batch{}, pools, pools[:1])
	c.fleet.pools = pools[:1]
	c.mu.Unlock()
	c.scaleWait(ctx)
	if got := ec2.Tagged(aws.TagPool, "l4"); len(got) != 0 {
		t.Errorf("l4's instances after it went: %+v", got)
	}
	if got := ec2.Tagged(aws.TagPool, "a10g"); len(got) != 1 || got[0].ID != a[0].ID {
		t.Errorf("a10g's instances: %+v, want %s alone", got, a[0].ID)
	}
}
