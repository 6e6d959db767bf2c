package aws

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/aws/ec2test"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

var (
	catOnce sync.Once
	cat     *catalog.Catalog
	catErr  error
)

func testCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	catOnce.Do(func() { cat, catErr = catalog.Load() })
	if catErr != nil {
		t.Fatal(catErr)
	}
	return cat
}

// joins is the test's join-token minter.
type joins struct {
	mu     sync.Mutex
	issued []string // node of each token, in order
}

func (j *joins) JoinToken(_ context.Context, pool, node string) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.issued = append(j.issued, node)
	return fmt.Sprintf("gfj_%s_%d", pool, len(j.issued)), nil
}

type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return time.Millisecond, nil }

const testAttempts = 3

func testSettings(endpoint string) Settings {
	return Settings{
		Region:         "us-east-1",
		Subnets:        []string{"subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"},
		SecurityGroups: []string{"sg-0123456789abcdef0"},
		AMI:            "ami-0123456789abcdef0",
		Endpoint:       endpoint,
		Bootstrap: Bootstrap{
			Server:    "https://fleet.example:7777",
			BinaryURL: "https://downloads.example/gpufleet/v0.9.0/gpufleet-linux-amd64",
			SHA256:    strings.Repeat("ab", 32),
		},
	}
}

func newTestProvider(t *testing.T, f *ec2test.Server, pool string, edit func(*Settings), opts ...func(*Options)) (*Provider, *joins) {
	t.Helper()
	s := testSettings(f.URL())
	if edit != nil {
		edit(&s)
	}
	j := &joins{}
	o := Options{
		Cluster: "test-fleet", Pool: pool, Catalog: testCatalog(t), JoinTokens: j,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		Retryer: func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts, o.Backoff, o.RateLimiter = testAttempts, noBackoff{}, ratelimit.None
			})
		},
	}
	for _, edit := range opts {
		edit(&o)
	}
	p, err := New(context.Background(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	return p, j
}

func findOffer(t *testing.T, p *Provider, typ, zone string, ct model.CapacityType) model.Offer {
	t.Helper()
	offers, err := p.Offers(context.Background())
	if err != nil {
		t.Fatalf("Offers: %v", err)
	}
	for _, o := range offers {
		if o.InstanceType == typ && o.Zone == zone && o.CapacityType == ct {
			return o
		}
	}
	t.Fatalf("no %s %s offer in %s among %d", ct, typ, zone, len(offers))
	return model.Offer{}
}

func TestConformance(t *testing.T) {
	f := ec2test.New(t)
	p, j := newTestProvider(t, f, "gpu", nil)
	f.Capacity["p4d.24xlarge/use1-az1/on-demand"] = 2
	f.SpotQuota = 1
	g5 := findOffer(t, p, "g5.xlarge", "use1-az1", model.OnDemand)
	providertest.Run(t, p, providertest.Options{
		Offer:    &g5,
		Capacity: &providertest.Limit{Offer: findOffer(t, p, "p4d.24xlarge", "use1-az1", model.OnDemand), N: 2},
		Quota:    &providertest.Limit{Offer: findOffer(t, p, "p5.48xlarge", "use1-az6", model.Spot), N: 1},
	})
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if len(f.Templates) != 0 {
		t.Errorf("launch templates left behind: %v", f.Templates)
	}
	// Every instance is tagged for the fleet, the pool and its node, and
	// booted with a join token minted for it.
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, in := range f.Instances {
		got := map[string]string{}
		for _, tg := range in.Tags {
			got[tg.Key] = tg.Value
		}
		if got[TagCluster] != "test-fleet" || got[TagPool] != "gpu" || got[TagNode] == "" || got[TagLaunchToken] == "" {
			t.Errorf("instance %s tags = %v", in.ID, got)
		}
		if !strings.Contains(in.UserData, "GPUFLEET_JOIN_TOKEN='gfj_gpu_") || !strings.Contains(in.UserData, "GPUFLEET_NODE='"+got[TagNode]+"'") {
			t.Errorf("instance %s user-data lacks its join token or node:\n%s", in.ID, in.UserData)
		}
	}
	if len(j.issued) < len(f.Instances) {
		t.Errorf("%d join tokens for %d instances", len(j.issued), len(f.Instances))
	}
}

func TestOffers(t *testing.T) {
	f := ec2test.New(t)
	p, _ := newTestProvider(t, f, "gpu", nil)
	offers, err := p.Offers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// On-demand prices and the fallback spot price are the catalog's.
	catPrice := func(typ, zone string, ct model.CapacityType) float64 {
		for _, o := range testCatalog(t).Offers() {
			if o.Provider == "aws" && o.Region == "us-east-1" && o.InstanceType == typ && o.CapacityType == ct && (zone == "" || o.Zone == zone) {
				return o.PricePerHour
			}
		}
		t.Fatalf("catalog has no %s %s", ct, typ)
		return 0
	}
	type key struct {
		Type, Zone string
		CT         model.CapacityType
	}
	got := map[key]float64{}
	for _, o := range offers {
		got[key{o.InstanceType, o.Zone, o.CapacityType}] = o.PricePerHour
		if o.Provider != "aws" || o.Region != "us-east-1" || o.GPUCount < 1 {
			t.Errorf("offer %+v", o)
		}
	}
	want := map[key]float64{
		{"g5.xlarge", "use1-az1", model.OnDemand}:    catPrice("g5.xlarge", "", model.OnDemand),
		{"g5.xlarge", "use1-az1", model.Spot}:        catPrice("g5.xlarge", "use1-az1", model.Spot), // no EC2 price: catalog's
		{"g5.xlarge", "use1-az6", model.OnDemand}:    catPrice("g5.xlarge", "", model.OnDemand),
		{"g5.xlarge", "use1-az6", model.Spot}:        0.4012, // EC2's price history
		{"p4d.24xlarge", "use1-az1", model.OnDemand}: catPrice("p4d.24xlarge", "", model.OnDemand),
		{"p4d.24xlarge", "use1-az1", model.Spot}:     2.5001, // the newer of two entries
		{"p5.48xlarge", "use1-az6", model.OnDemand}:  catPrice("p5.48xlarge", "", model.OnDemand),
		{"p5.48xlarge", "use1-az6", model.Spot}:      18.0001, // entry without a zone id: mapped by zone name
		// g6.xlarge is offered but the catalog cannot price it; m7i.large
		// has no GPU; neither is listed.
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("offers (-want +got):\n%s", diff)
	}
	p5 := findOffer(t, p, "p5.48xlarge", "use1-az6", model.OnDemand)
	if p5.GPU != "H100" || p5.GPUCount != 8 || p5.GPUMemory != 80*model.GiB {
		t.Errorf("p5.48xlarge offer = %+v; want 8 H100 of 80 GiB", p5)
	}
	if n := f.CallCount("DescribeInstanceTypes"); n != 2 {
		t.Errorf("DescribeInstanceTypes calls = %d; want 2 (two pages)", n)
	}
}

func TestOffersRefresh(t *testing.T) {
	f := ec2test.New(t)
	clk := clock.NewFake(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	p, _ := newTestProvider(t, f, "gpu", nil, func(o *Options) { o.Clock = clk })
	calls := func() [2]int {
		return [2]int{f.CallCount("DescribeInstanceTypes"), f.CallCount("DescribeSpotPriceHistory")}
	}
	for _, step := range []struct {
		advance time.Duration
		want    [2]int // instance type pages, spot price reads, so far
	}{
		{0, [2]int{2, 1}},
		{4 * time.Minute, [2]int{2, 1}},  // within OffersTTL: reused
		{2 * time.Minute, [2]int{2, 2}},  // spot prices again, types cached
		{55 * time.Minute, [2]int{4, 3}}, // an hour on: types again too
	} {
		clk.Advance(step.advance)
		if _, err := p.Offers(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := calls(); got != step.want {
			t.Errorf("after %v more: calls (types, spot) = %v, want %v", step.advance, got, step.want)
		}
	}
}

func TestLaunchErrors(t *testing.T) {
	tests := map[string]struct {
		setup func(f *ec2test.Server)
		typ   string
		zone  string
		ct    model.CapacityType
		check func(error) bool
		calls int // CreateFleet calls the SDK made
	}{
		"insufficient capacity": {
			setup: func(f *ec2test.Server) { f.Capacity["g5.xlarge/use1-az6/on-demand"] = 0 },
			typ:   "g5.xlarge", zone: "use1-az6", ct: model.OnDemand,
			check: provider.IsInsufficientCapacity, calls: 1,
		},
		"vCPU limit": {
			setup: func(f *ec2test.Server) { f.Fail["CreateFleet"] = "VcpuLimitExceeded" },
			typ:   "p5.48xlarge", zone: "use1-az6", ct: model.OnDemand,
			check: provider.IsQuotaExceeded, calls: 1,
		},
		"spot instance count": {
			setup: func(f *ec2test.Server) { f.SpotQuota = 0 },
			typ:   "p5.48xlarge", zone: "use1-az6", ct: model.Spot,
			check: provider.IsQuotaExceeded, calls: 1,
		},
		"throttled past the retryer": {
			setup: func(f *ec2test.Server) { f.Throttle["CreateFleet"] = 100 },
			typ:   "g5.xlarge", zone: "use1-az1", ct: model.OnDemand,
			check: provider.IsTransient, calls: testAttempts,
		},
		"throttled then through": {
			setup: func(f *ec2test.Server) { f.Throttle["CreateFleet"] = testAttempts - 1 },
			typ:   "g5.xlarge", zone: "use1-az1", ct: model.OnDemand,
			check: func(err error) bool { return err == nil }, calls: testAttempts,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := ec2test.New(t)
			p, _ := newTestProvider(t, f, "gpu", nil)
			o := findOffer(t, p, tc.typ, tc.zone, tc.ct)
			tc.setup(f)
			_, err := p.Launch(context.Background(), provider.LaunchRequest{Offer: o, Token: "node-1"})
			if !tc.check(err) {
				t.Fatalf("Launch error = %v", err)
			}
			kinds := 0
			for _, is := range []func(error) bool{provider.IsInsufficientCapacity, provider.IsQuotaExceeded, provider.IsTransient} {
				if is(err) {
					kinds++
				}
			}
			if kinds > 1 {
				t.Errorf("error %v reads as %d kinds", err, kinds)
			}
			var ice *provider.InsufficientCapacityError
			if errors.As(err, &ice) && ice.Offer != o {
				t.Errorf("capacity error offer = %+v, want %+v", ice.Offer, o)
			}
			if n := f.CallCount("CreateFleet"); n != tc.calls {
				t.Errorf("CreateFleet calls = %d, want %d", n, tc.calls)
			}
			f.Mu.Lock()
			defer f.Mu.Unlock()
			if len(f.Templates) != 0 {
				t.Errorf("launch templates left behind: %v", f.Templates)
			}
		})
	}
}

func TestPartialFulfilment(t *testing.T) {
	f := ec2test.New(t)
	p, _ := newTestProvider(t, f, "gpu", func(s *Settings) { s.AnyZone = true })
	// A spot launch may use either zone; use1-az6 (listed first) is full.
	f.Capacity["g5.xlarge/use1-az6/spot"] = 0
	asked := findOffer(t, p, "g5.xlarge", "use1-az6", model.Spot)
	in, err := p.Launch(context.Background(), provider.LaunchRequest{Offer: asked, Token: "node-1"})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if want := findOffer(t, p, "g5.xlarge", "use1-az1", model.Spot); in.Offer != want {
		t.Errorf("instance offer = %+v; want the zone it got, %+v", in.Offer, want)
	}
	listed, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != in.ID || listed[0].Offer.Zone != "use1-az1" {
		t.Errorf("List = %+v", listed)
	}
	// Both zones full: no instance, and the fleet's errors say why.
	f.Capacity["g5.xlarge/use1-az1/spot"] = 1
	_, err = p.Launch(context.Background(), provider.LaunchRequest{Offer: asked, Token: "node-2"})
	if !provider.IsInsufficientCapacity(err) {
		t.Errorf("Launch with both zones full: %v, want insufficient capacity", err)
	}
}

func TestLaunchIdempotentAcrossRestart(t *testing.T) {
	f := ec2test.New(t)
	f.NoZoneID = true // zones from the subnets' names, as older answers need
	p, _ := newTestProvider(t, f, "gpu", nil)
	o := findOffer(t, p, "g5.xlarge", "use1-az6", model.OnDemand)
	req := provider.LaunchRequest{Offer: o, Token: "node-7", Labels: map[string]string{"gpufleet.dev/node": "node-7"}}
	first, err := p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	restarted, j := newTestProvider(t, f, "gpu", nil)
	again, err := restarted.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !sameOfferForTest(again.Offer, o) || again.Labels["gpufleet.dev/node"] != "node-7" {
		t.Errorf("relaunch after a restart = %+v; want %s with its offer and labels", again, first.ID)
	}
	if n := f.CallCount("CreateFleet"); n != 1 {
		t.Errorf("CreateFleet calls = %d, want 1", n)
	}
	if len(j.issued) != 0 {
		t.Errorf("the restarted driver minted join tokens %v for a launch that had happened", j.issued)
	}
}

func sameOfferForTest(a, b model.Offer) bool {
	return a.InstanceType == b.InstanceType && a.Zone == b.Zone && a.CapacityType == b.CapacityType && a.Region == b.Region
}

func TestPoolsAreApart(t *testing.T) {
	f := ec2test.New(t)
	a, _ := newTestProvider(t, f, "a", nil)
	b, _ := newTestProvider(t, f, "b", nil)
	o := findOffer(t, a, "g5.xlarge", "use1-az1", model.OnDemand)
	in, err := a.Launch(context.Background(), provider.LaunchRequest{Offer: o, Token: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.List(context.Background()); err != nil || len(got) != 0 {
		t.Errorf("pool b lists %v, %v; want nothing", got, err)
	}
	if err := b.Terminate(context.Background(), in.ID); err == nil {
		t.Errorf("pool b terminated pool a's instance")
	}
	if got, err := a.List(context.Background()); err != nil || len(got) != 1 {
		t.Errorf("pool a lists %v, %v; want its instance", got, err)
	}
}

func TestNewValidates(t *testing.T) {
	s := testSettings("http://127.0.0.1:1")
	s.Subnets = append(s.Subnets, "subnet-nothex")
	_, err := New(context.Background(), s, Options{Pool: "gpu"})
	for _, want := range []string{"spec.aws.subnets[2]", "cluster", "catalog", "joinTokens"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error = %v; want one naming %s", err, want)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := map[string]struct {
		edit func(*Settings)
		want []string // field paths
	}{
		"valid":   {func(*Settings) {}, nil},
		"nothing": {func(s *Settings) { *s = Settings{} }, []string{"spec.aws.ami", "spec.aws.bootstrap.binaryURL", "spec.aws.bootstrap.server", "spec.aws.bootstrap.sha256", "spec.aws.region", "spec.aws.securityGroups", "spec.aws.subnets"}},
		"bad ids": {func(s *Settings) {
			s.Subnets = []string{"subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60001", "sub"}
			s.SecurityGroups = []string{"group"}
		}, []string{"spec.aws.securityGroups[0]", "spec.aws.subnets[1]", "spec.aws.subnets[2]"}},
		"http binary":     {func(s *Settings) { s.Bootstrap.BinaryURL = "http://x/gpufleet" }, []string{"spec.aws.bootstrap.binaryURL"}},
		"both sources":    {func(s *Settings) { s.Bootstrap.BinaryS3 = "s3://b/k" }, []string{"spec.aws.bootstrap.binaryS3"}},
		"s3 needs a role": {func(s *Settings) { s.Bootstrap.BinaryURL, s.Bootstrap.BinaryS3 = "", "s3://bucket/gpufleet" }, []string{"spec.aws.bootstrap.binaryS3"}},
		"s3 with a role": {func(s *Settings) {
			s.Bootstrap.BinaryURL, s.Bootstrap.BinaryS3, s.InstanceProfile = "", "s3://bucket/gpufleet", "gpufleet-node"
		}, nil},
		"bad profile ARN":  {func(s *Settings) { s.InstanceProfile = "arn:aws:iam::1:role/x" }, []string{"spec.aws.instanceProfile"}},
		"bad endpoint":     {func(s *Settings) { s.Endpoint = "ec2.local" }, []string{"spec.aws.endpoint"}},
		"root volume":      {func(s *Settings) { s.RootVolumeGiB = -1 }, []string{"spec.aws.rootVolumeGiB"}},
		"CA is not PEM":    {func(s *Settings) { s.Bootstrap.ServerCA = "hello" }, []string{"spec.aws.bootstrap.serverCA"}},
		"region spelling":  {func(s *Settings) { s.Region = "US East" }, []string{"spec.aws.region"}},
		"digest uppercase": {func(s *Settings) { s.Bootstrap.SHA256 = strings.Repeat("AB", 32) }, []string{"spec.aws.bootstrap.sha256"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := testSettings("")
			tc.edit(&s)
			var got []string
			if err := ValidateSettings(s, "spec.aws").Err(); err != nil {
				var fe model.FieldErrors
				if !errors.As(err, &fe) {
					t.Fatalf("Validate error %T is not field errors", err)
				}
				for _, e := range fe {
					got = append(got, e.Path)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("field paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUserData(t *testing.T) {
	b := testSettings("").Bootstrap
	b.ServerCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
	ud, err := UserData{Bootstrap: b, JoinToken: "gfj_abc", Node: "node-1", Region: "us-east-1"}.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#!/bin/sh", "curl --fail", "'" + b.BinaryURL + "'", "sha256sum -c -", "GPUFLEET_JOIN_TOKEN='gfj_abc'",
		"GPUFLEET_SERVER='https://fleet.example:7777'", "GPUFLEET_CA=/etc/gpufleet/ca.pem", "X-aws-ec2-metadata-token-ttl-seconds",
		"systemctl enable --now gpufleet-agent.service",
	} {
		if !strings.Contains(ud, want) {
			t.Errorf("user-data lacks %q:\n%s", want, ud)
		}
	}
	if strings.Contains(ud, "--token") || strings.Contains(ud, "--join-token") {
		t.Errorf("the join token must not be on a command line:\n%s", ud)
	}
	// The script parses as POSIX shell (dash, as on Ubuntu's /bin/sh).
	sh, err := exec.LookPath("dash")
	if err != nil {
		sh = "/bin/sh"
	}
	path := t.TempDir() + "/user-data"
	if err := os.WriteFile(path, []byte(ud), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
		t.Errorf("%s -n user-data: %v\n%s", sh, err, out)
	}

	s3 := b
	s3.BinaryURL, s3.BinaryS3 = "", "s3://bucket/gpufleet/v1"
	ud, err = UserData{Bootstrap: s3, JoinToken: "gfj_abc", Node: "node-1", Region: "us-east-1"}.Render()
	if err != nil || !strings.Contains(ud, "aws s3 cp --only-show-errors 's3://bucket/gpufleet/v1'") {
		t.Errorf("S3 user-data = %v:\n%s", err, ud)
	}

	for name, u := range map[string]UserData{
		"no token":       {Bootstrap: b, Node: "n", Region: "us-east-1"},
		"quote in token": {Bootstrap: b, JoinToken: "a'b", Node: "n", Region: "us-east-1"},
		"newline node":   {Bootstrap: b, JoinToken: "t", Node: "n\nx", Region: "us-east-1"},
		"no binary":      {Bootstrap: Bootstrap{Server: b.Server, SHA256: b.SHA256}, JoinToken: "t", Node: "n", Region: "us-east-1"},
	} {
		if _, err := u.Render(); err == nil {
			t.Errorf("%s: Render succeeded", name)
		}
	}
}

func TestReportedNotices(t *testing.T) {
	f := ec2test.New(t)
	p, _ := newTestProvider(t, f, "gpu", nil)
	ctx := context.Background()
	o := findOffer(t, p, "g5.xlarge", "use1-az6", model.Spot)
	a, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Launch(ctx, provider.LaunchRequest{Offer: o, Token: "b"})
	if err != nil {
		t.Fatal(err)
	}
	before := f.CallCount("DescribeInstances")
	if got, err := p.Notices(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Notices with none reported = %v, %v", got, err)
	}
	if n := f.CallCount("DescribeInstances"); n != before {
		t.Errorf("Notices called EC2 with nothing reported")
	}
	issued := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	na := provider.Notice{InstanceID: a.ID, IssuedAt: issued, Deadline: issued.Add(2 * time.Minute)}
	nb := provider.Notice{InstanceID: b.ID, IssuedAt: issued, Deadline: issued.Add(90 * time.Second), Reason: "rebalance-drill"}
	for _, n := range []provider.Notice{na, nb, {InstanceID: "i-00000000000000001", IssuedAt: issued, Deadline: issued.Add(time.Minute)}} {
		if err := p.ReportNotice(n); err != nil {
			t.Fatal(err)
		}
	}
	// A later report does not move the first deadline.
	if err := p.ReportNotice(provider.Notice{InstanceID: a.ID, IssuedAt: issued, Deadline: issued.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := p.ReportNotice(provider.Notice{InstanceID: "node-1", IssuedAt: issued, Deadline: issued}); err == nil {
		t.Errorf("a notice without an instance id was recorded")
	}
	na.Reason = ReasonSpotInterruption
	got, err := p.Notices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.Notice{nb, na}, got); diff != "" {
		t.Errorf("Notices (-want +got):\n%s", diff)
	}
	if err := p.Terminate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	got, err = p.Notices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.Notice{na}, got); diff != "" {
		t.Errorf("Notices after terminating %s (-want +got):\n%s", b.ID, diff)
	}
}

// TestCheckPool: an aws pool needs its block, checked with field paths
// under the manifest's spec.
func TestCheckPool(t *testing.T) {
	s := testSettings("")
	spec := model.NodePoolSpec{Provider: Name, AWS: &s, Max: 4}
	if fe := CheckPool(&spec, "spec", nil); len(fe) > 0 {
		t.Errorf("CheckPool: %v", fe)
	}
	s.Subnets = []string{"subnet-x"}
	if fe := CheckPool(&spec, "spec", nil); len(fe) != 1 || fe[0].Path != "spec.aws.subnets[0]" {
		t.Errorf("a bad subnet: %v", fe)
	}
	spec.AWS = nil
	if fe := CheckPool(&spec, "spec", nil); len(fe) != 1 || fe[0].Path != "spec.aws" {
		t.Errorf("an aws pool without its block: %v", fe)
	}
}
