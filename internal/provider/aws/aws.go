package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Name is the provider name in offers, nodes and events.
const Name = "aws"

// Tags the driver sets on every instance (and reads back in List).
const (
	TagCluster = "gpufleet:cluster"
	TagPool    = "gpufleet:pool"
	TagNode    = "gpufleet:node"
	// TagLaunchToken holds a digest of LaunchRequest.Token, so a launch
	// retried after a restart finds its instance.
	TagLaunchToken = "gpufleet:launch-token"
	// TagLabelPrefix prefixes a request label's key: label team=nlp is the
	// tag gpufleet:label:team=nlp.
	TagLabelPrefix = "gpufleet:label:"
	// labelNode is the request label naming the node (autoscaler.LabelNode).
	labelNode = "gpufleet.dev/node"
)

// JoinTokens mints the one-time tokens instances bootstrap with.
type JoinTokens interface {
	// JoinToken returns a new one-time token for the instance about to be
	// launched for node: the agent exchanges it once, on first contact,
	// for the node's agent token, and the server accepts the exchange only
	// from the instance the launch returned (its id is in the agent's
	// registration). Called once per launch attempt; a token whose launch
	// failed is never used.
	JoinToken(ctx context.Context, pool, node string) (string, error)
}

// Options are what the driver needs besides the pool's settings.
type Options struct {
	// Cluster and Pool name the fleet and pool; they are the values of the
	// gpufleet:cluster and gpufleet:pool tags. Required.
	Cluster, Pool string
	// Catalog prices offers. Required.
	Catalog *catalog.Catalog
	// JoinTokens mints the instances' join tokens. Required.
	JoinTokens JoinTokens
	// Clock stamps launches and ages the offers cache. Default clock.Real.
	Clock clock.Clock
	// Logger receives partial-fulfilment and cleanup notes. Default: discard.
	Logger *slog.Logger
	// OffersTTL is how long listed offers (and spot prices) are reused.
	// Default 5m.
	OffersTTL time.Duration
	// TypesTTL is how long the GPU instance types are reused. Default 1h.
	TypesTTL time.Duration
	// Credentials override the SDK's default chain (tests); nil uses it.
	Credentials sdkaws.CredentialsProvider
	// HTTPClient carries the EC2 calls; nil is the SDK's.
	HTTPClient *http.Client
	// Retryer overrides the SDK's standard retryer (5 attempts, with
	// exponential back-off); tests use one without delays.
	Retryer func() sdkaws.Retryer
}

// Provider is the EC2 driver of one pool. It is safe for concurrent use.
type Provider struct {
	s    Settings
	opts Options
	ec2  *ec2.Client
	log  *slog.Logger

	// mu guards the caches below; it is never held across an EC2 call.
	mu        sync.Mutex
	subnets   []subnet // the pool's subnets, in Settings order, once read
	offers    []model.Offer
	offersAt  time.Time
	typeFacts map[string]model.Offer     // instance type → GPU facts (no zone, price)
	launches  map[string]*launch         // LaunchRequest.Token → its launch
	notices   map[string]provider.Notice // by instance id (ReportNotice)
	// gpuFacts are the GPU types DescribeInstanceTypes gave at typesAt;
	// they change with AWS launches, not by the minute, so they are read
	// again only after TypesTTL.
	gpuFacts map[string]model.Offer
	typesAt  time.Time
}

// subnet is one of the pool's subnets.
type subnet struct{ id, zone, zoneID string }

// launch serialises the launches of one token; done and in, its result,
// are guarded by Provider.mu.
type launch struct {
	mu   sync.Mutex
	done bool
	in   provider.Instance
}

var (
	_ provider.Provider = (*Provider)(nil)
)

// New validates s and builds the driver. It reads credentials lazily (the
// SDK's default chain: environment, shared config, IMDS role) and makes no
// EC2 call until Offers or Launch.
func New(ctx context.Context, s Settings, opts Options) (*Provider, error) {
	var fe model.FieldErrors
	fe = append(fe, ValidateSettings(s, settingsPath)...)
	if opts.Cluster == "" {
		fe.Add("cluster", "is required: the fleet's name, tagged on every instance")
	}
	if opts.Pool == "" {
		fe.Add("pool", "is required: the pool's name, tagged on every instance")
	}
	if opts.Catalog == nil {
		fe.Add("catalog", "is required")
	}
	if opts.JoinTokens == nil {
		fe.Add("joinTokens", "is required")
	}
	if err := fe.Err(); err != nil {
		return nil, fmt.Errorf("configuring aws pool %s: %w", opts.Pool, err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OffersTTL <= 0 {
		opts.OffersTTL = 5 * time.Minute
	}
	if opts.TypesTTL <= 0 {
		opts.TypesTTL = time.Hour
	}
	if opts.Retryer == nil {
		opts.Retryer = func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 5 })
		}
	}
	loaders := []func(*config.LoadOptions) error{config.WithRegion(s.Region), config.WithRetryer(opts.Retryer)}
	if opts.Credentials != nil {
		loaders = append(loaders, config.WithCredentialsProvider(opts.Credentials))
	}
	if opts.HTTPClient != nil {
		loaders = append(loaders, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return nil, fmt.Errorf("loading aws config for pool %s: %w", opts.Pool, err)
	}
	client := ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if s.Endpoint != "" {
			o.BaseEndpoint = sdkaws.String(s.Endpoint)
		}
	})
	return &Provider{s: s, opts: opts, ec2: client, log: opts.Logger.With("provider", Name, "pool", opts.Pool),
		typeFacts: map[string]model.Offer{}, launches: map[string]*launch{}}, nil
}

// Name returns "aws", the cloud's name in offers.
func (p *Provider) Name() string { return Name }

// Launch starts one instance for req.Offer with CreateFleet (type instant).
// Errors: ErrUnknownOffer for an offer this pool does not list,
// *InsufficientCapacityError, ErrQuotaExceeded, ErrTransient, or the
// context's error.
func (p *Provider) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if err := ctx.Err(); err != nil {
		return provider.Instance{}, err
	}
	if req.Token == "" {
		return provider.Instance{}, errors.New("launching on aws: a launch token is required")
	}
	p.mu.Lock()
	l := p.launches[req.Token]
	if l == nil {
		l = &launch{}
		p.launches[req.Token] = l
	}
	p.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	p.mu.Lock()
	done, prev := l.done, l.in
	p.mu.Unlock()
	if done {
		return cloneInstance(prev), nil
	}
	in, err := p.launchOnce(ctx, req)
	if err != nil {
		return provider.Instance{}, err
	}
	p.mu.Lock()
	l.done, l.in = true, in
	p.mu.Unlock()
	return cloneInstance(in), nil
}

func (p *Provider) launchOnce(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	o := req.Offer
	offers, err := p.Offers(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	if !containsOffer(offers, o) {
		return provider.Instance{}, fmt.Errorf("launching %s %s in %s: %w", o.CapacityType, o.InstanceType, o.Zone, provider.ErrUnknownOffer)
	}
	digest := tokenDigest(p.opts.Cluster, p.opts.Pool, req.Token)
	// A launch that ran before a restart left its instance tagged.
	if in, ok, err := p.findByDigest(ctx, digest); err != nil {
		return provider.Instance{}, err
	} else if ok {
		return in, nil
	}
	node := req.Labels[labelNode]
	if node == "" {
		node = req.Token
	}
	join, err := p.opts.JoinTokens.JoinToken(ctx, p.opts.Pool, node)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("minting the join token of node %s: %w", node, err)
	}
	ud, err := UserData{Bootstrap: p.s.Bootstrap, JoinToken: join, Node: node, Region: p.s.Region}.Render()
	if err != nil {
		return provider.Instance{}, err
	}
	tags := p.instanceTags(node, digest, req.Labels)
	return p.createFleet(ctx, o, digest, ud, tags, req.Labels)
}

// instanceTags are the tags of an instance launched for node.
func (p *Provider) instanceTags(node, digest string, labels map[string]string) []types.Tag {
	tags := []types.Tag{
		{Key: sdkaws.String(TagCluster), Value: sdkaws.String(p.opts.Cluster)},
		{Key: sdkaws.String(TagPool), Value: sdkaws.String(p.opts.Pool)},
		{Key: sdkaws.String(TagNode), Value: sdkaws.String(node)},
		{Key: sdkaws.String(TagLaunchToken), Value: sdkaws.String(digest)},
		{Key: sdkaws.String("Name"), Value: sdkaws.String("gpufleet-" + p.opts.Pool + "-" + node)},
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tags = append(tags, types.Tag{Key: sdkaws.String(TagLabelPrefix + k), Value: sdkaws.String(labels[k])})
	}
	return tags
}

// tokenDigest names a launch in tags, client tokens and template names:
// 32 hex digits of SHA-256 over the cluster, pool and token.
func tokenDigest(cluster, pool, token string) string {
	h := sha256.Sum256([]byte(cluster + "\x00" + pool + "\x00" + token))
	return hex.EncodeToString(h[:16])
}

// Terminate terminates instance id if it is this pool's. An instance that
// is gone, or an id EC2 does not know, is success; an instance of another
// pool is refused.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !strings.HasPrefix(id, "i-") {
		return nil // not an instance id: nothing of ours to stop
	}
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		if isGone(err) {
			p.forget(id)
			return nil
		}
		return classify(fmt.Sprintf("describing instance %s", id), err, model.Offer{})
	}
	for _, r := range out.Reservations {
		for _, inst := range r.Instances {
			if sdkaws.ToString(inst.InstanceId) != id {
				continue
			}
			if tag(inst.Tags, TagCluster) != p.opts.Cluster || tag(inst.Tags, TagPool) != p.opts.Pool {
				return fmt.Errorf("terminating %s: it is not an instance of aws pool %s/%s", id, p.opts.Cluster, p.opts.Pool)
			}
			if gone(inst.State) {
				p.forget(id)
				return nil
			}
		}
	}
	if _, err := p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil && !isGone(err) {
		return classify(fmt.Sprintf("terminating instance %s", id), err, model.Offer{})
	}
	p.forget(id)
	return nil
}

// forget drops the remembered launch of id, so memory holds live launches
// only. A replay of its token then finds the instance terminated by its
// tag, for as long as EC2 shows terminated instances (about an hour).
func (p *Provider) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tok, l := range p.launches {
		if l.done && l.in.ID == id {
			l.in.State = provider.StateTerminated // for a replay already waiting on l.mu
			delete(p.launches, tok)
		}
	}
}

// List returns every pending, running, stopping or stopped instance tagged
// with this pool's cluster and pool.
func (p *Provider) List(ctx context.Context) ([]provider.Instance, error) {
	return p.describe(ctx, []types.Filter{
		{Name: sdkaws.String("tag:" + TagCluster), Values: []string{p.opts.Cluster}},
		{Name: sdkaws.String("tag:" + TagPool), Values: []string{p.opts.Pool}},
		{Name: sdkaws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	})
}

// findByDigest returns the instance a launch with this digest started, if
// EC2 still shows one (terminated instances stay visible for about an
// hour, and are reported terminated).
func (p *Provider) findByDigest(ctx context.Context, digest string) (provider.Instance, bool, error) {
	found, err := p.describe(ctx, []types.Filter{
		{Name: sdkaws.String("tag:" + TagCluster), Values: []string{p.opts.Cluster}},
		{Name: sdkaws.String("tag:" + TagPool), Values: []string{p.opts.Pool}},
		{Name: sdkaws.String("tag:" + TagLaunchToken), Values: []string{digest}},
	}, provider.StateTerminated)
	if err != nil || len(found) == 0 {
		return provider.Instance{}, false, err
	}
	// A live instance wins over a terminated one.
	sort.SliceStable(found, func(i, j int) bool {
		return found[i].State != provider.StateTerminated && found[j].State == provider.StateTerminated
	})
	return found[0], true, nil
}

// describe pages through DescribeInstances; terminated instances are
// dropped unless keep names their state.
func (p *Provider) describe(ctx context.Context, filters []types.Filter, keep ...string) ([]provider.Instance, error) {
	subnets, err := p.readSubnets(ctx)
	if err != nil {
		return nil, err
	}
	var out []provider.Instance
	pages := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{Filters: filters, MaxResults: sdkaws.Int32(1000)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("listing instances", err, model.Offer{})
		}
		for _, r := range page.Reservations {
			for _, inst := range r.Instances {
				in := p.instance(inst, subnets)
				if in.State == provider.StateTerminated && len(keep) == 0 {
					continue
				}
				out = append(out, in)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// instance converts an EC2 instance into the provider's view.
func (p *Provider) instance(inst types.Instance, subnets []subnet) provider.Instance {
	zoneID := ""
	if pl := inst.Placement; pl != nil {
		zoneID = sdkaws.ToString(pl.AvailabilityZoneId)
		if zoneID == "" {
			for _, s := range subnets {
				if s.zone == sdkaws.ToString(pl.AvailabilityZone) {
					zoneID = s.zoneID
				}
			}
		}
	}
	ct := model.OnDemand
	if inst.InstanceLifecycle == types.InstanceLifecycleTypeSpot {
		ct = model.Spot
	}
	in := provider.Instance{
		ID:     sdkaws.ToString(inst.InstanceId),
		Offer:  p.offerOf(string(inst.InstanceType), zoneID, ct),
		State:  stateOf(inst.State),
		Labels: map[string]string{},
	}
	if inst.LaunchTime != nil {
		in.LaunchedAt = inst.LaunchTime.UTC()
	}
	for _, t := range inst.Tags {
		if k, ok := strings.CutPrefix(sdkaws.ToString(t.Key), TagLabelPrefix); ok {
			in.Labels[k] = sdkaws.ToString(t.Value)
		}
	}
	if len(in.Labels) == 0 {
		in.Labels = nil
	}
	return in
}

// offerOf returns the listed offer for an instance's type, zone and
// capacity type, or one built from the type's facts when it is no longer
// listed (its price then unknown, 0).
func (p *Provider) offerOf(instanceType, zoneID string, ct model.CapacityType) model.Offer {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.offers {
		if o.InstanceType == instanceType && o.Zone == zoneID && o.CapacityType == ct {
			return o
		}
	}
	o := p.typeFacts[instanceType]
	o.Provider, o.Region, o.Zone, o.InstanceType, o.CapacityType = Name, p.s.Region, zoneID, instanceType, ct
	return o
}

func stateOf(s *types.InstanceState) string {
	if s == nil {
		return provider.StatePending
	}
	switch s.Name {
	case types.InstanceStateNamePending:
		return provider.StatePending
	case types.InstanceStateNameRunning:
		return provider.StateRunning
	case types.InstanceStateNameShuttingDown, types.InstanceStateNameTerminated:
		return provider.StateTerminated
	default:
		return string(s.Name) // stopping, stopped
	}
}

func gone(s *types.InstanceState) bool { return stateOf(s) == provider.StateTerminated }

func tag(tags []types.Tag, key string) string {
	for _, t := range tags {
		if sdkaws.ToString(t.Key) == key {
			return sdkaws.ToString(t.Value)
		}
	}
	return ""
}

func containsOffer(offers []model.Offer, o model.Offer) bool {
	for _, x := range offers {
		if x.Provider == o.Provider && x.Region == o.Region && x.Zone == o.Zone && x.InstanceType == o.InstanceType && x.CapacityType == o.CapacityType {
			return true
		}
	}
	return false
}

func cloneInstance(in provider.Instance) provider.Instance {
	if in.Labels != nil {
		labels := make(map[string]string, len(in.Labels))
		for k, v := range in.Labels {
			labels[k] = v
		}
		in.Labels = labels
	}
	return in
}
