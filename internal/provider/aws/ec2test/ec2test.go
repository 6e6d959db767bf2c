// Package ec2test is an EC2 endpoint for tests: an httptest server that
// speaks EC2's Query protocol (form-encoded Action=… requests, XML
// answers) to the SDK's real serializers, deserializers and retryer, with
// instances, capacity per type/zone/lifecycle and a spot quota as state.
package ec2test

import (
	"bytes"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"
)

// The EC2 endpoint of the tests: an httptest server that speaks EC2's Query
// protocol (form-encoded Action=… requests, XML answers) to the SDK's real
// serializers, deserializers and retryer. Its answers are the documents in
// testdata (see testdata/PROVENANCE.md): the static ones served as they
// are, the stateful ones (launches, inventory) rendered from templates of
// the same shape.

//go:embed testdata
var testdata embed.FS

// The pool's subnets, as testdata/describe-subnets.xml describes them.
var Subnets = map[string][2]string{ // subnet → zone name, zone id
	"subnet-0a1b2c3d4e5f60001": {"us-east-1a", "use1-az6"},
	"subnet-0a1b2c3d4e5f60002": {"us-east-1b", "use1-az1"},
}

type Tag struct{ Key, Value string }

type Instance struct {
	ID, Reservation, AMI, InstanceType, Lifecycle string
	SubnetID, Zone, ZoneID                        string
	State                                         string
	StateCode                                     int
	LaunchTime                                    string
	Tags                                          []Tag
	ZoneIDInDescribe                              bool
	// UserData is what the launch template gave the instance.
	UserData string
}

type fleetError struct{ InstanceType, SubnetID, Lifecycle, Code, Message string }

// Server is the test's EC2. Its fields after Mu are guarded by Mu.
type Server struct {
	t    testing.TB
	srv  *httptest.Server
	tmpl *template.Template

	Mu        sync.Mutex
	seq       int
	Instances map[string]*Instance
	Templates map[string]string // launch template name → user-data
	fleets    map[string][]byte // client token → the answer given
	calls     map[string]int    // by action
	// Capacity is the most live instances per "type/zone id/lifecycle";
	// absent: unlimited.
	Capacity map[string]int
	// SpotQuota is the most live spot instances; -1: unlimited.
	SpotQuota int
	// Throttle answers the next N calls of an action RequestLimitExceeded.
	Throttle map[string]int
	// Fail answers every call of an action with this error code.
	Fail map[string]string
	// PageSize is DescribeInstances' page size, to exercise paging.
	PageSize int
	// NoZoneID leaves availabilityZoneId out of DescribeInstances, as
	// older answers do.
	NoZoneID bool
}

// URL is the endpoint to give the driver (Settings.Endpoint).
func (f *Server) URL() string { return f.srv.URL }

// New starts a server, closed at t's cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	tmpl, err := template.ParseFS(testdata, "testdata/*.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	f := &Server{t: t, tmpl: tmpl, Instances: map[string]*Instance{}, Templates: map[string]string{},
		fleets: map[string][]byte{}, calls: map[string]int{}, Capacity: map[string]int{}, SpotQuota: -1,
		Throttle: map[string]int{}, Fail: map[string]string{}, PageSize: 2}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// CallCount is how many calls of action the server answered.
func (f *Server) CallCount(action string) int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.calls[action]
}

func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		f.apiError(w, http.StatusUnauthorized, "AuthFailure", "request is not signed")
		return
	}
	action := r.Form.Get("Action")
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.calls[action]++
	f.seq++
	if f.Throttle[action] > 0 {
		f.Throttle[action]--
		f.apiError(w, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	}
	if c := f.Fail[action]; c != "" {
		f.apiError(w, http.StatusBadRequest, c, "injected by the test")
		return
	}
	switch action {
	case "DescribeSubnets":
		f.static(w, "describe-subnets.xml")
	case "DescribeInstanceTypes":
		if r.Form.Get("NextToken") == "page-2" {
			f.static(w, "describe-instance-types-2.xml")
		} else {
			f.static(w, "describe-instance-types-1.xml")
		}
	case "DescribeInstanceTypeOfferings":
		if r.Form.Get("LocationType") != "availability-zone-id" {
			f.apiError(w, http.StatusBadRequest, "InvalidParameterValue", "test expects zone ids")
			return
		}
		f.static(w, "describe-instance-type-offerings.xml")
	case "DescribeSpotPriceHistory":
		if r.Form.Get("ProductDescription.1") != "Linux/UNIX" || r.Form.Get("StartTime") == "" {
			f.apiError(w, http.StatusBadRequest, "InvalidParameterValue", "test expects Linux/UNIX prices from now")
			return
		}
		f.static(w, "describe-spot-price-history.xml")
	case "CreateLaunchTemplate":
		f.createLaunchTemplate(w, r.Form)
	case "DeleteLaunchTemplate":
		name := r.Form.Get("LaunchTemplateName")
		if _, ok := f.Templates[name]; !ok {
			f.apiError(w, http.StatusBadRequest, "InvalidLaunchTemplateName.NotFoundException", "no template "+name)
			return
		}
		delete(f.Templates, name)
		f.render(w, "delete-launch-template.xml.tmpl", map[string]any{"RequestID": f.requestID(), "Time": time.Now().UTC().Format(time.RFC3339), "ID": "lt-0abcdef1234567890", "Name": name})
	case "CreateFleet":
		f.createFleet(w, r.Form)
	case "DescribeInstances":
		f.describeInstances(w, r.Form)
	case "TerminateInstances":
		f.terminateInstances(w, r.Form)
	default:
		f.apiError(w, http.StatusBadRequest, "InvalidAction", "the test's EC2 does not answer "+action)
	}
}

func (f *Server) requestID() string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", f.seq) }

func (f *Server) static(w http.ResponseWriter, name string) {
	b, err := testdata.ReadFile("testdata/" + name)
	if err != nil {
		f.t.Error(err)
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(b)
}

func (f *Server) render(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := f.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		f.t.Errorf("rendering %s: %v", name, err)
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(b.Bytes())
}

func (f *Server) apiError(w http.ResponseWriter, status int, code, msg string) {
	var b bytes.Buffer
	if err := f.tmpl.ExecuteTemplate(&b, "error.xml.tmpl", map[string]string{"Code": code, "Message": msg, "RequestID": f.requestID()}); err != nil {
		f.t.Error(err)
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// list returns the values of a Query list: prefix.1, prefix.2, …
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// tags reads prefix.Tag.N.Key/Value.
func tags(form url.Values, prefix string) []Tag {
	var out []Tag
	for i := 1; ; i++ {
		k := form.Get(fmt.Sprintf("%s.Tag.%d.Key", prefix, i))
		if k == "" {
			return out
		}
		out = append(out, Tag{k, form.Get(fmt.Sprintf("%s.Tag.%d.Value", prefix, i))})
	}
}

func (f *Server) createLaunchTemplate(w http.ResponseWriter, form url.Values) {
	name := form.Get("LaunchTemplateName")
	if _, ok := f.Templates[name]; ok {
		f.apiError(w, http.StatusBadRequest, "InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
		return
	}
	if form.Get("LaunchTemplateData.MetadataOptions.HttpTokens") != "required" {
		f.t.Errorf("launch template %s does not require IMDSv2 tokens", name)
	}
	if !regexp.MustCompile(`^ami-[0-9a-f]+$`).MatchString(form.Get("LaunchTemplateData.ImageId")) || form.Get("LaunchTemplateData.SecurityGroupId.1") == "" {
		f.apiError(w, http.StatusBadRequest, "MissingParameter", "image and security group required")
		return
	}
	ud, err := base64.StdEncoding.DecodeString(form.Get("LaunchTemplateData.UserData"))
	if err != nil {
		f.apiError(w, http.StatusBadRequest, "InvalidUserData.Malformed", err.Error())
		return
	}
	f.Templates[name] = string(ud)
	f.render(w, "create-launch-template.xml.tmpl", map[string]any{"RequestID": f.requestID(), "Time": time.Now().UTC().Format(time.RFC3339), "ID": "lt-0abcdef1234567890", "Name": name})
}

func (f *Server) live(match func(*Instance) bool) int {
	n := 0
	for _, in := range f.Instances {
		if in.State != "terminated" && in.State != "shutting-down" && match(in) {
			n++
		}
	}
	return n
}

func (f *Server) createFleet(w http.ResponseWriter, form url.Values) {
	token := form.Get("ClientToken")
	if b, ok := f.fleets[token]; ok {
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		_, _ = w.Write(b)
		return
	}
	if form.Get("Type") != "instant" || form.Get("TargetCapacitySpecification.TotalTargetCapacity") != "1" {
		f.apiError(w, http.StatusBadRequest, "InvalidParameterValue", "the test's EC2 takes instant fleets of one")
		return
	}
	lifecycle := form.Get("TargetCapacitySpecification.DefaultTargetCapacityType")
	if lifecycle == "spot" && form.Get("SpotOptions.AllocationStrategy") != "price-capacity-optimized" {
		f.t.Errorf("spot fleet allocation strategy = %q", form.Get("SpotOptions.AllocationStrategy"))
	}
	ltName := form.Get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName")
	ud, ok := f.Templates[ltName]
	if !ok {
		f.apiError(w, http.StatusBadRequest, "InvalidLaunchTemplateName.NotFoundException", "no template "+ltName)
		return
	}
	var instTags []Tag
	for i := 1; form.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i)) != ""; i++ {
		if form.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i)) == "instance" {
			instTags = tags(form, fmt.Sprintf("TagSpecification.%d", i))
		}
	}
	data := map[string]any{"RequestID": f.requestID(), "FleetID": fmt.Sprintf("fleet-%08x-0000-4000-8000-%012x", f.seq, f.seq), "Template": ltName}
	var errs []fleetError
	var launched []*Instance
	for i := 1; ; i++ {
		p := fmt.Sprintf("LaunchTemplateConfigs.1.Overrides.%d.", i)
		typ, sub := form.Get(p+"InstanceType"), form.Get(p+"SubnetId")
		if typ == "" {
			break
		}
		z, ok := Subnets[sub]
		if !ok {
			f.apiError(w, http.StatusBadRequest, "InvalidSubnetID.NotFound", "no subnet "+sub)
			return
		}
		key := typ + "/" + z[1] + "/" + lifecycle
		if n, limited := f.Capacity[key]; limited && f.live(func(in *Instance) bool { return in.InstanceType+"/"+in.ZoneID+"/"+in.Lifecycle == key }) >= n {
			errs = append(errs, fleetError{typ, sub, lifecycle, "InsufficientInstanceCapacity",
				fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", typ, z[0])})
			continue
		}
		if lifecycle == "spot" && f.SpotQuota >= 0 && f.live(func(in *Instance) bool { return in.Lifecycle == "spot" }) >= f.SpotQuota {
			errs = append(errs, fleetError{typ, sub, lifecycle, "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded"})
			continue
		}
		in := &Instance{
			ID: fmt.Sprintf("i-%017x", 0x0a000000+f.seq), Reservation: fmt.Sprintf("r-%017x", f.seq), AMI: "ami-0123456789abcdef0",
			InstanceType: typ, Lifecycle: lifecycle, SubnetID: sub, Zone: z[0], ZoneID: z[1],
			State: "pending", StateCode: 0, LaunchTime: time.Now().UTC().Truncate(time.Second).Format("2006-01-02T15:04:05.000Z"),
			Tags: instTags, UserData: ud,
		}
		f.Instances[in.ID] = in
		launched = append(launched, in)
		break // capacity 1: the first pool with room fills it
	}
	data["Errors"], data["Instances"] = errs, launched
	var b bytes.Buffer
	if err := f.tmpl.ExecuteTemplate(&b, "create-fleet.xml.tmpl", data); err != nil {
		f.t.Error(err)
	}
	f.fleets[token] = b.Bytes()
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(b.Bytes())
}

var instanceIDRE = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)

func (f *Server) describeInstances(w http.ResponseWriter, form url.Values) {
	ids := list(form, "InstanceId")
	for _, id := range ids {
		if !instanceIDRE.MatchString(id) {
			f.apiError(w, http.StatusBadRequest, "InvalidInstanceID.Malformed", fmt.Sprintf("Invalid id: %q", id))
			return
		}
		if f.Instances[id] == nil {
			f.apiError(w, http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id))
			return
		}
	}
	type filter struct {
		name   string
		values []string
	}
	var filters []filter
	for i := 1; form.Get(fmt.Sprintf("Filter.%d.Name", i)) != ""; i++ {
		filters = append(filters, filter{form.Get(fmt.Sprintf("Filter.%d.Name", i)), list(form, fmt.Sprintf("Filter.%d.Value", i))})
	}
	var match []*Instance
	for _, in := range f.Instances {
		ok := len(ids) == 0 || slices.Contains(ids, in.ID)
		for _, fl := range filters {
			switch {
			case fl.name == "instance-state-name":
				ok = ok && slices.Contains(fl.values, in.State)
			case strings.HasPrefix(fl.name, "tag:"):
				key := strings.TrimPrefix(fl.name, "tag:")
				i := slices.IndexFunc(in.Tags, func(t Tag) bool { return t.Key == key })
				ok = ok && i >= 0 && slices.Contains(fl.values, in.Tags[i].Value)
			default:
				f.t.Errorf("the test's EC2 does not filter by %s", fl.name)
			}
		}
		if ok {
			match = append(match, in)
		}
	}
	slices.SortFunc(match, func(a, b *Instance) int { return strings.Compare(a.ID, b.ID) })
	start, _ := strconv.Atoi(form.Get("NextToken"))
	end := min(start+f.PageSize, len(match))
	page := make([]Instance, 0, end-start)
	for _, in := range match[start:end] {
		c := *in
		c.ZoneIDInDescribe = !f.NoZoneID
		page = append(page, c)
	}
	next := ""
	if end < len(match) {
		next = strconv.Itoa(end)
	}
	f.render(w, "describe-instances.xml.tmpl", map[string]any{"RequestID": f.requestID(), "Instances": page, "NextToken": next})
	// An instance is running from the first time it is seen.
	for _, in := range match[start:end] {
		if in.State == "pending" {
			in.State, in.StateCode = "running", 16
		}
	}
}

func (f *Server) terminateInstances(w http.ResponseWriter, form url.Values) {
	ids := list(form, "InstanceId")
	var out []Instance
	for _, id := range ids {
		in := f.Instances[id]
		if in == nil {
			f.apiError(w, http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id))
			return
		}
		out = append(out, *in)
		in.State, in.StateCode = "terminated", 48
	}
	f.render(w, "terminate-instances.xml.tmpl", map[string]any{"RequestID": f.requestID(), "Instances": out})
}

// Live returns copies of the instances not terminated or shutting down,
// ordered by id.
func (f *Server) Live() []Instance {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []Instance
	for _, in := range f.Instances {
		if in.State != "terminated" && in.State != "shutting-down" {
			out = append(out, *in)
		}
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Tagged returns the live instances (as Live) that carry tag key=value:
// what DescribeInstances with a tag:KEY filter lists, less terminated ones.
func (f *Server) Tagged(key, value string) []Instance {
	var out []Instance
	for _, in := range f.Live() {
		if slices.Contains(in.Tags, Tag{Key: key, Value: value}) {
			out = append(out, in)
		}
	}
	return out
}
