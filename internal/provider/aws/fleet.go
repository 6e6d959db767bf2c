package aws

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// createFleet launches one instance of o with a launch template made for
// this launch (it carries the instance's own user-data, which fleet
// overrides cannot) and an instant fleet, then deletes the template.
//
// An instant fleet answers 200 with the instances it launched and an error
// per override it could not fill. One instance and some errors is a
// partial fulfilment of the overrides, and a success; no instance is a
// failure of the kind of the errors (see fleetFailure).
func (p *Provider) createFleet(ctx context.Context, o model.Offer, digest, userData string, tags []types.Tag, labels map[string]string) (provider.Instance, error) {
	subnets, err := p.readSubnets(ctx)
	if err != nil {
		return provider.Instance{}, err
	}
	var overrides []types.FleetLaunchTemplateOverridesRequest
	for _, s := range subnets {
		if s.zoneID == o.Zone || (p.s.AnyZone && o.CapacityType == model.Spot) {
			overrides = append(overrides, types.FleetLaunchTemplateOverridesRequest{InstanceType: types.InstanceType(o.InstanceType), SubnetId: sdkaws.String(s.id)})
		}
	}
	if len(overrides) == 0 {
		return provider.Instance{}, fmt.Errorf("launching %s in %s: no subnet of the pool is in that zone: %w", o.InstanceType, o.Zone, provider.ErrUnknownOffer)
	}

	name := "gpufleet-" + digest
	if err := p.createTemplate(ctx, name, digest, userData, tags); err != nil {
		return provider.Instance{}, classify(fmt.Sprintf("creating launch template %s", name), err, o)
	}
	defer func() {
		// The template only carried this launch; the instance keeps its
		// copy of the user-data. A leftover is harmless and is replaced by
		// the next launch with this token.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := p.ec2.DeleteLaunchTemplate(cctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: sdkaws.String(name)}); err != nil {
			p.log.Warn("deleting launch template", "template", name, "err", err)
		}
	}()

	target := &types.TargetCapacitySpecificationRequest{TotalTargetCapacity: sdkaws.Int32(1), DefaultTargetCapacityType: types.DefaultTargetCapacityTypeOnDemand}
	in := &ec2.CreateFleetInput{
		Type:        types.FleetTypeInstant,
		ClientToken: sdkaws.String(name),
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateName: sdkaws.String(name), Version: sdkaws.String("$Latest")},
			Overrides:                   overrides,
		}},
		TargetCapacitySpecification: target,
		OnDemandOptions:             &types.OnDemandOptionsRequest{AllocationStrategy: types.FleetOnDemandAllocationStrategyLowestPrice},
		TagSpecifications:           []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}},
	}
	if o.CapacityType == model.Spot {
		target.DefaultTargetCapacityType = types.DefaultTargetCapacityTypeSpot
		in.OnDemandOptions = nil
		in.SpotOptions = &types.SpotOptionsRequest{
			AllocationStrategy:           types.SpotAllocationStrategyPriceCapacityOptimized,
			InstanceInterruptionBehavior: types.SpotInstanceInterruptionBehaviorTerminate,
		}
	}
	out, err := p.ec2.CreateFleet(ctx, in)
	if err != nil {
		return provider.Instance{}, classify(fmt.Sprintf("launching %s %s in %s", o.CapacityType, o.InstanceType, o.Zone), err, o)
	}
	for _, fi := range out.Instances {
		if len(fi.InstanceIds) == 0 {
			continue
		}
		zoneID := sdkaws.ToString(fi.AvailabilityZoneId)
		sid := sdkaws.ToString(fi.SubnetId)
		if sid == "" && fi.LaunchTemplateAndOverrides != nil && fi.LaunchTemplateAndOverrides.Overrides != nil {
			sid = sdkaws.ToString(fi.LaunchTemplateAndOverrides.Overrides.SubnetId)
		}
		for _, s := range subnets {
			if zoneID == "" && s.id == sid {
				zoneID = s.zoneID
			}
		}
		if zoneID == "" {
			zoneID = o.Zone
		}
		if len(fi.InstanceIds) > 1 || len(out.Instances) > 1 {
			// A fleet of capacity 1 should not do this; never leak the extra.
			p.log.Warn("fleet launched more than asked", "fleet", sdkaws.ToString(out.FleetId), "instances", fi.InstanceIds)
		}
		for _, e := range out.Errors {
			p.log.Info("fleet override not filled", "fleet", sdkaws.ToString(out.FleetId), "code", sdkaws.ToString(e.ErrorCode), "message", sdkaws.ToString(e.ErrorMessage))
		}
		ct := model.OnDemand
		if fi.Lifecycle == types.InstanceLifecycleSpot {
			ct = model.Spot
		}
		inst := provider.Instance{
			ID:         fi.InstanceIds[0],
			Offer:      p.offerOf(o.InstanceType, zoneID, ct),
			State:      provider.StatePending,
			LaunchedAt: p.opts.Clock.Now().UTC(),
			Labels:     cloneInstance(provider.Instance{Labels: labels}).Labels,
		}
		if zoneID == o.Zone && ct == o.CapacityType {
			inst.Offer = o
		}
		return inst, nil
	}
	return provider.Instance{}, fleetFailure(o, out.Errors)
}

// createTemplate creates the launch template of one launch, replacing a
// leftover of an earlier attempt with this token (its join token may have
// been spent).
func (p *Provider) createTemplate(ctx context.Context, name, digest, userData string, tags []types.Tag) error {
	data := &types.RequestLaunchTemplateData{
		ImageId:          sdkaws.String(p.s.AMI),
		SecurityGroupIds: p.s.SecurityGroups,
		UserData:         sdkaws.String(base64String(userData)),
		// IMDSv2 only: token sessions, one hop (no containers reaching it).
		MetadataOptions: &types.LaunchTemplateInstanceMetadataOptionsRequest{
			HttpTokens:              types.LaunchTemplateHttpTokensStateRequired,
			HttpEndpoint:            types.LaunchTemplateInstanceMetadataEndpointStateEnabled,
			HttpPutResponseHopLimit: sdkaws.Int32(1),
		},
		TagSpecifications: []types.LaunchTemplateTagSpecificationRequest{{ResourceType: types.ResourceTypeVolume, Tags: tags}},
	}
	if p.s.KeyName != "" {
		data.KeyName = sdkaws.String(p.s.KeyName)
	}
	if ip := p.s.InstanceProfile; ip != "" {
		spec := &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: sdkaws.String(ip)}
		if len(ip) > 4 && ip[:4] == "arn:" {
			spec = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{Arn: sdkaws.String(ip)}
		}
		data.IamInstanceProfile = spec
	}
	if p.s.RootVolumeGiB > 0 {
		data.BlockDeviceMappings = []types.LaunchTemplateBlockDeviceMappingRequest{{
			DeviceName: sdkaws.String("/dev/sda1"),
			Ebs: &types.LaunchTemplateEbsBlockDeviceRequest{
				VolumeSize: sdkaws.Int32(int32(p.s.RootVolumeGiB)), VolumeType: types.VolumeTypeGp3,
				DeleteOnTermination: sdkaws.Bool(true), Encrypted: sdkaws.Bool(true),
			},
		}}
	}
	ltTags := []types.TagSpecification{{ResourceType: types.ResourceTypeLaunchTemplate, Tags: tags[:4]}}
	create := func() error {
		_, err := p.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: sdkaws.String(name), LaunchTemplateData: data, TagSpecifications: ltTags,
		})
		return err
	}
	err := create()
	if code(err) == "InvalidLaunchTemplateName.AlreadyExistsException" {
		if _, derr := p.ec2.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: sdkaws.String(name)}); derr != nil {
			return derr
		}
		err = create()
	}
	return err
}

// EC2 error codes the driver branches on.
var (
	capacityCodes = map[string]bool{
		"InsufficientInstanceCapacity": true, "InsufficientHostCapacity": true, "InsufficientReservedInstanceCapacity": true,
		"InsufficientCapacity": true, "InsufficientCapacityOnHost": true,
		// Spot: the max price is below the market, or the pool has none.
		"SpotMaxPriceTooLow": true, "UnfulfillableCapacity": true,
	}
	quotaCodes = map[string]bool{
		"VcpuLimitExceeded": true, "MaxSpotInstanceCountExceeded": true, "InstanceLimitExceeded": true,
		"MaxSpotFleetRequestCountExceeded": true, "MaxFleetCountExceeded": true, "LaunchTemplateLimitExceeded": true,
	}
	transientCodes = map[string]bool{
		"RequestLimitExceeded": true, "Throttling": true, "InternalError": true, "Unavailable": true,
		"ServiceUnavailable": true, "InternalFailure": true,
	}
	goneCodes = map[string]bool{"InvalidInstanceID.NotFound": true, "InvalidInstanceID.Malformed": true}
)

// code returns the EC2 error code of err, or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isGone(err error) bool { return goneCodes[code(err)] }

// classify wraps err, from doing, in the provider's error kind for its EC2
// code. A context error is returned as such (wrapped).
func classify(doing string, err error, o model.Offer) error {
	c := code(err)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", doing, err)
	case capacityCodes[c]:
		return fmt.Errorf("%s: %w (%v)", doing, &provider.InsufficientCapacityError{Offer: o}, err)
	case quotaCodes[c]:
		return fmt.Errorf("%s: %w: %w", doing, provider.ErrQuotaExceeded, err)
	case transientCodes[c]:
		return fmt.Errorf("%s: %w: %w", doing, provider.ErrTransient, err)
	case c == "" && errors.As(err, new(*smithyhttp.RequestSendError)):
		// No answer from EC2 at all (connection refused, reset): the SDK
		// has retried already; a later call may get through.
		return fmt.Errorf("%s: %w: %w", doing, provider.ErrTransient, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// fleetFailure is the error of an instant fleet that launched nothing. The
// kind that most limits what a retry can do wins: a quota blocks every
// offer of the region, capacity only this one, throttling only this call.
func fleetFailure(o model.Offer, errs []types.CreateFleetError) error {
	if len(errs) == 0 {
		return fmt.Errorf("launching %s %s in %s: the fleet launched nothing and said why not: %w", o.CapacityType, o.InstanceType, o.Zone, provider.ErrTransient)
	}
	rank := func(c string) int {
		switch {
		case quotaCodes[c]:
			return 3
		case capacityCodes[c]:
			return 2
		case transientCodes[c]:
			return 1
		}
		return 0
	}
	worst := errs[0]
	for _, e := range errs[1:] {
		if rank(sdkaws.ToString(e.ErrorCode)) > rank(sdkaws.ToString(worst.ErrorCode)) {
			worst = e
		}
	}
	c := sdkaws.ToString(worst.ErrorCode)
	fe := &smithy.GenericAPIError{Code: c, Message: sdkaws.ToString(worst.ErrorMessage)}
	return classify(fmt.Sprintf("launching %s %s in %s (fleet: %d overrides failed)", o.CapacityType, o.InstanceType, o.Zone, len(errs)), fe, o)
}
