package aws

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/gpufleet/gpufleet/internal/model"
)

// spotProduct is the spot price series the driver reads: Linux AMIs, as
// the catalog's spot prices are.
const spotProduct = "Linux/UNIX"

// Offers lists, for every GPU instance type EC2 offers in a zone of the
// pool's subnets, an on-demand offer priced from the catalog and a spot
// offer priced by the newest DescribeSpotPriceHistory entry for that zone
// (the catalog's spot price where EC2 gives none). Types the catalog has no
// on-demand price for are left out: gpufleet does not launch what it cannot
// price. The list is reused for OffersTTL.
func (p *Provider) Offers(ctx context.Context) ([]model.Offer, error) {
	now := p.opts.Clock.Now()
	p.mu.Lock()
	if p.offers != nil && now.Sub(p.offersAt) < p.opts.OffersTTL {
		out := slices.Clone(p.offers)
		p.mu.Unlock()
		return out, nil
	}
	p.mu.Unlock()

	offers, facts, err := p.readOffers(ctx, now)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.offers, p.offersAt = offers, now
	for k, v := range facts {
		p.typeFacts[k] = v
	}
	return slices.Clone(offers), nil
}

// readSubnets reads the zones of the pool's subnets once.
func (p *Provider) readSubnets(ctx context.Context) ([]subnet, error) {
	p.mu.Lock()
	if p.subnets != nil {
		defer p.mu.Unlock()
		return p.subnets, nil
	}
	p.mu.Unlock()
	out, err := p.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: p.s.Subnets})
	if err != nil {
		return nil, classify("describing the pool's subnets", err, model.Offer{})
	}
	byID := map[string]types.Subnet{}
	for _, s := range out.Subnets {
		byID[sdkaws.ToString(s.SubnetId)] = s
	}
	var subnets []subnet
	zones := map[string]bool{}
	for i, id := range p.s.Subnets {
		s, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("%s.subnets[%d]: subnet %s not found in %s", settingsPath, i, id, p.s.Region)
		}
		zid := sdkaws.ToString(s.AvailabilityZoneId)
		if zones[zid] {
			return nil, fmt.Errorf("%s.subnets[%d]: subnet %s is in zone %s like an earlier one; list one subnet per zone", settingsPath, i, id, zid)
		}
		zones[zid] = true
		subnets = append(subnets, subnet{id: id, zone: sdkaws.ToString(s.AvailabilityZone), zoneID: zid})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subnets = subnets
	return subnets, nil
}

// readOffers asks EC2 what is offered and prices it. It returns the offers
// sorted by type, zone and capacity type, and each GPU type's facts (not
// to be modified: they may be the cached ones).
func (p *Provider) readOffers(ctx context.Context, now time.Time) ([]model.Offer, map[string]model.Offer, error) {
	subnets, err := p.readSubnets(ctx)
	if err != nil {
		return nil, nil, err
	}
	// 1. GPU instance types and their facts (the catalog's where it knows
	// the type, so offers use the catalog's GPU names).
	p.mu.Lock()
	facts := p.gpuFacts
	if facts != nil && now.Sub(p.typesAt) >= p.opts.TypesTTL {
		facts = nil
	}
	p.mu.Unlock()
	if facts == nil {
		if facts, err = p.gpuTypes(ctx); err != nil {
			return nil, nil, err
		}
		p.mu.Lock()
		p.gpuFacts, p.typesAt = facts, now
		p.mu.Unlock()
	}
	if len(facts) == 0 {
		return []model.Offer{}, facts, nil
	}
	names := make([]string, 0, len(facts))
	for n := range facts {
		names = append(names, n)
	}
	slices.Sort(names)

	// 2. Where each type is offered, among the pool's zones.
	zoneIDs := make([]string, len(subnets))
	for i, s := range subnets {
		zoneIDs[i] = s.zoneID
	}
	where := map[string][]string{} // type → zone ids
	pages := ec2.NewDescribeInstanceTypeOfferingsPaginator(p.ec2, &ec2.DescribeInstanceTypeOfferingsInput{
		LocationType: types.LocationTypeAvailabilityZoneId,
		Filters:      []types.Filter{{Name: sdkaws.String("location"), Values: zoneIDs}},
		MaxResults:   sdkaws.Int32(1000),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("listing instance type offerings", err, model.Offer{})
		}
		for _, o := range page.InstanceTypeOfferings {
			t := string(o.InstanceType)
			if _, ok := facts[t]; ok && slices.Contains(zoneIDs, sdkaws.ToString(o.Location)) {
				where[t] = append(where[t], sdkaws.ToString(o.Location))
			}
		}
	}

	// 3. Prices: on-demand and spot fallbacks from the catalog, spot from
	// EC2's price history.
	catOnDemand, catSpot, catRate := p.catalogPrices()
	spot, err := p.spotPrices(ctx, names, subnets, now)
	if err != nil {
		return nil, nil, err
	}

	var offers []model.Offer
	for _, t := range names {
		od, ok := catOnDemand[t]
		if !ok {
			continue
		}
		zs := where[t]
		slices.Sort(zs)
		for _, z := range slices.Compact(zs) {
			o := facts[t]
			o.Provider, o.Region, o.Zone, o.InstanceType = Name, p.s.Region, z, t
			o.CapacityType, o.PricePerHour = model.OnDemand, od
			offers = append(offers, o)
			sp, ok := spot[[2]string{t, z}]
			if !ok {
				sp, ok = catSpot[[2]string{t, z}]
			}
			if !ok {
				sp, ok = catSpot[[2]string{t, ""}]
			}
			if ok && sp > 0 {
				o.CapacityType, o.PricePerHour, o.InterruptionRate = model.Spot, sp, catRate[t]
				offers = append(offers, o)
			}
		}
	}
	if offers == nil {
		offers = []model.Offer{}
	}
	return offers, facts, nil
}

// gpuTypes pages through DescribeInstanceTypes and keeps the types with
// GPUs, as offer templates (facts only).
func (p *Provider) gpuTypes(ctx context.Context) (map[string]model.Offer, error) {
	known := map[string]model.Offer{}
	for _, it := range p.opts.Catalog.InstanceTypes() {
		if it.Provider == Name {
			known[it.Name] = model.Offer{GPU: it.GPU, GPUCount: it.GPUCount, GPUMemory: it.GPUMemory, VCPUs: it.VCPUs, Memory: it.Memory, Interconnect: it.Interconnect}
		}
	}
	facts := map[string]model.Offer{}
	pages := ec2.NewDescribeInstanceTypesPaginator(p.ec2, &ec2.DescribeInstanceTypesInput{MaxResults: sdkaws.Int32(100)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("listing instance types", err, model.Offer{})
		}
		for _, it := range page.InstanceTypes {
			gi := it.GpuInfo
			if gi == nil || len(gi.Gpus) == 0 || sdkaws.ToInt32(gi.Gpus[0].Count) < 1 {
				continue
			}
			name := string(it.InstanceType)
			if k, ok := known[name]; ok {
				facts[name] = k
				continue
			}
			g := gi.Gpus[0]
			o := model.Offer{GPU: sdkaws.ToString(g.Name), GPUCount: int(sdkaws.ToInt32(g.Count))}
			if canon, ok := p.opts.Catalog.CanonicalGPU(o.GPU); ok {
				o.GPU = canon
			}
			if g.MemoryInfo != nil {
				o.GPUMemory = model.Bytes(sdkaws.ToInt32(g.MemoryInfo.SizeInMiB)) * model.MiB
			}
			if it.VCpuInfo != nil {
				o.VCPUs = float64(sdkaws.ToInt32(it.VCpuInfo.DefaultVCpus))
			}
			if it.MemoryInfo != nil {
				o.Memory = model.Bytes(sdkaws.ToInt64(it.MemoryInfo.SizeInMiB)) * model.MiB
			}
			facts[name] = o
		}
	}
	return facts, nil
}

// catalogPrices returns the catalog's prices in the pool's region: the
// on-demand price by type, spot by type and zone id ("" for the region's
// cheapest zone), and the spot interruption rate by type.
func (p *Provider) catalogPrices() (onDemand map[string]float64, spot map[[2]string]float64, rate map[string]float64) {
	onDemand, spot, rate = map[string]float64{}, map[[2]string]float64{}, map[string]float64{}
	for _, o := range p.opts.Catalog.Offers() {
		if o.Provider != Name || o.Region != p.s.Region {
			continue
		}
		switch o.CapacityType {
		case model.OnDemand:
			if cur, ok := onDemand[o.InstanceType]; !ok || o.PricePerHour < cur {
				onDemand[o.InstanceType] = o.PricePerHour
			}
		case model.Spot:
			spot[[2]string{o.InstanceType, o.Zone}] = o.PricePerHour
			if cur, ok := spot[[2]string{o.InstanceType, ""}]; !ok || o.PricePerHour < cur {
				spot[[2]string{o.InstanceType, ""}] = o.PricePerHour
			}
			rate[o.InstanceType] = o.InterruptionRate
		}
	}
	return onDemand, spot, rate
}

// spotPrices returns the newest spot price by type and zone id. A
// StartTime of now makes EC2 return the price in force now for each zone.
func (p *Provider) spotPrices(ctx context.Context, typeNames []string, subnets []subnet, now time.Time) (map[[2]string]float64, error) {
	zoneOf := map[string]string{}
	for _, s := range subnets {
		zoneOf[s.zone] = s.zoneID
	}
	its := make([]types.InstanceType, len(typeNames))
	for i, n := range typeNames {
		its[i] = types.InstanceType(n)
	}
	type priced struct {
		at    time.Time
		price float64
	}
	newest := map[[2]string]priced{}
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.ec2, &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes:       its,
		ProductDescriptions: []string{spotProduct},
		StartTime:           sdkaws.Time(now),
		MaxResults:          sdkaws.Int32(1000),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("reading spot prices", err, model.Offer{})
		}
		for _, sp := range page.SpotPriceHistory {
			zid := sdkaws.ToString(sp.AvailabilityZoneId)
			if zid == "" {
				zid = zoneOf[sdkaws.ToString(sp.AvailabilityZone)]
			}
			price, err := strconv.ParseFloat(strings.TrimSpace(sdkaws.ToString(sp.SpotPrice)), 64)
			if zid == "" || err != nil || !(price > 0) || math.IsInf(price, 0) {
				continue
			}
			k := [2]string{string(sp.InstanceType), zid}
			at := sdkaws.ToTime(sp.Timestamp)
			if cur, ok := newest[k]; !ok || at.After(cur.at) {
				newest[k] = priced{at, price}
			}
		}
	}
	out := make(map[[2]string]float64, len(newest))
	for k, v := range newest {
		out[k] = v.price
	}
	return out, nil
}
