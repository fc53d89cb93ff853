package broker

import (
	"bytes"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/testutil/faultproxy"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestAPIDescriptors walks every API a broker advertises in ApiVersions,
// on its client listeners and on the controller listener, and fails when
// a part of its descriptor is missing: a handler, an authorization rule,
// an answer with one error everywhere (that carries the error and
// encodes at every version), a quota rule; a forwarded API must also be
// served on the controller listener. A new API cannot be answered with an
// empty body or refused by a closed connection because its file forgot a
// part.
func TestAPIDescriptors(t *testing.T) {
	b := startBroker(t, nil)
	resp := rawRequest(t, b.Addr(), kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	if len(resp.ApiKeys) != len(apis) {
		t.Errorf("ApiVersions advertises %d APIs, %d are registered", len(resp.ApiKeys), len(apis))
	}
	const code = -42 // an error code no handler answers
	for _, k := range resp.ApiKeys {
		name := kmsg.NameForKey(k.ApiKey)
		a := apis[k.ApiKey]
		if a == nil {
			t.Errorf("%s: advertised, not registered", name)
			continue
		}
		checkDescriptor(t, a, k.MinVersion, k.MaxVersion, code)
		if a.quota == nil {
			t.Errorf("%s: no quota rule", name)
		}
		if a.forwarded {
			c := controllerAPIs[k.ApiKey]
			if c == nil {
				t.Errorf("%s: forwarded, but the controller listener does not serve it", name)
				continue
			}
			if c.min != a.min || c.max != a.max {
				t.Errorf("%s: v%d-%d on the client listeners, v%d-%d on the controller's", name, a.min, a.max, c.min, c.max)
			}
		}
	}
	for key, vr := range (controllerHandler{b.Broker}).Versions() {
		checkDescriptor(t, controllerAPIs[key], vr.Min, vr.Max, code)
	}
}

func checkDescriptor(t *testing.T, a *api, minVersion, maxVersion int16, code int16) {
	t.Helper()
	name := kmsg.NameForKey(a.key.Int16())
	switch {
	case a.min != minVersion || a.max != maxVersion:
		t.Errorf("%s: registered v%d-%d, advertised v%d-%d", name, a.min, a.max, minVersion, maxVersion)
	case a.handle == nil:
		t.Errorf("%s: no handler", name)
	case a.authorize == nil:
		t.Errorf("%s: no authorization rule", name)
	case a.errors == nil:
		t.Errorf("%s: no answer with one error everywhere", name)
	}
	if a.errors == nil {
		return
	}
	if v := kmsg.RequestForKey(a.key.Int16()); v == nil || a.max > v.MaxVersion() {
		t.Errorf("%s: v%d is beyond what kmsg knows", name, a.max)
		return
	}
	for v := a.min; v <= a.max; v++ {
		req := kmsg.RequestForKey(a.key.Int16())
		req.SetVersion(v)
		fillOne(reflect.ValueOf(req).Elem(), 3)
		resp := errorAnswer(a, req, code)
		if !carriesCode(resp, code) {
			t.Errorf("%s v%d: the error answer %+v carries no error", name, v, resp)
		}
		if resp.GetVersion() != v {
			t.Errorf("%s v%d: the error answer is at v%d", name, v, resp.GetVersion())
		}
		resp.AppendTo(nil) // must encode at every version
	}
}

// forwardCase is a forwarded API's request naming one resource, and the
// error codes its response gives that resource (or the request, for APIs
// that name none).
type forwardCase struct {
	key   kmsg.Key
	req   func(topic string, timeoutMillis int32) kmsg.Request
	codes func(kmsg.Response) []int16
}

// forwardCases has every forwarded API, in an order the active controller
// can carry out one after the other on one topic.
var forwardCases = []forwardCase{
	{kmsg.CreateTopics, func(topic string, ms int32) kmsg.Request {
		r := kmsg.NewPtrCreateTopicsRequest()
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 1, 1
		r.Topics, r.TimeoutMillis = append(r.Topics, t), ms
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, t := range resp.(*kmsg.CreateTopicsResponse).Topics {
			codes = append(codes, t.ErrorCode)
		}
		return codes
	}},
	{kmsg.CreatePartitions, func(topic string, ms int32) kmsg.Request {
		r := kmsg.NewPtrCreatePartitionsRequest()
		t := kmsg.NewCreatePartitionsRequestTopic()
		t.Topic, t.Count = topic, 2
		r.Topics, r.TimeoutMillis = append(r.Topics, t), ms
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, t := range resp.(*kmsg.CreatePartitionsResponse).Topics {
			codes = append(codes, t.ErrorCode)
		}
		return codes
	}},
	{kmsg.AlterConfigs, func(topic string, _ int32) kmsg.Request {
		r := kmsg.NewPtrAlterConfigsRequest()
		res := kmsg.NewAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name, c.Value = "retention.ms", kmsg.StringPtr("3600000")
		res.Configs = append(res.Configs, c)
		r.Resources = append(r.Resources, res)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.AlterConfigsResponse).Resources {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.IncrementalAlterConfigs, func(topic string, _ int32) kmsg.Request {
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = "retention.ms", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("7200000")
		res.Configs = append(res.Configs, c)
		r.Resources = append(r.Resources, res)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.CreateACLs, func(topic string, _ int32) kmsg.Request {
		r := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, topic, kmsg.ACLResourcePatternTypeLiteral
		c.Principal, c.Host, c.Operation, c.PermissionType = "User:alice", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
		r.Creations = append(r.Creations, c)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.CreateACLsResponse).Results {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.DeleteACLs, func(topic string, _ int32) kmsg.Request {
		r := kmsg.NewPtrDeleteACLsRequest()
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, kmsg.StringPtr(topic), kmsg.ACLResourcePatternTypeLiteral
		f.Principal, f.Host, f.Operation, f.PermissionType = kmsg.StringPtr("User:alice"), kmsg.StringPtr("*"), kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
		r.Filters = append(r.Filters, f)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.DeleteACLsResponse).Results {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.ElectLeaders, func(topic string, ms int32) kmsg.Request {
		r := kmsg.NewPtrElectLeadersRequest()
		t := kmsg.NewElectLeadersRequestTopic()
		t.Topic, t.Partitions = topic, []int32{0}
		r.Topics, r.TimeoutMillis = append(r.Topics, t), ms
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, t := range resp.(*kmsg.ElectLeadersResponse).Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
		return codes
	}},
	{kmsg.AlterClientQuotas, func(string, int32) kmsg.Request {
		r := kmsg.NewPtrAlterClientQuotasRequest()
		e := kmsg.NewAlterClientQuotasRequestEntry()
		c := kmsg.NewAlterClientQuotasRequestEntryEntity()
		c.Type, c.Name = "user", kmsg.StringPtr("alice")
		op := kmsg.NewAlterClientQuotasRequestEntryOp()
		op.Key, op.Value = "producer_byte_rate", 1<<20
		e.Entity, e.Ops = append(e.Entity, c), append(e.Ops, op)
		r.Entries = append(r.Entries, e)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, e := range resp.(*kmsg.AlterClientQuotasResponse).Entries {
			codes = append(codes, e.ErrorCode)
		}
		return codes
	}},
	{kmsg.AlterUserSCRAMCredentials, func(string, int32) kmsg.Request {
		r := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Mechanism, u.Iterations = "alice", 1, 4096
		u.Salt, u.SaltedPassword = bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 32)
		r.Upsertions = append(r.Upsertions, u)
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.AlterUserSCRAMCredentialsResponse).Results {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.UpdateFeatures, func(_ string, ms int32) kmsg.Request {
		r := kmsg.NewPtrUpdateFeaturesRequest()
		u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
		u.Feature, u.MaxVersionLevel, u.UpgradeType = "transaction.version", 2, 1
		r.FeatureUpdates, r.ValidateOnly, r.TimeoutMillis = append(r.FeatureUpdates, u), true, ms
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, r := range resp.(*kmsg.UpdateFeaturesResponse).Results {
			codes = append(codes, r.ErrorCode)
		}
		return codes
	}},
	{kmsg.AlterPartitionAssignments, func(topic string, ms int32) kmsg.Request {
		r := kmsg.NewPtrAlterPartitionAssignmentsRequest()
		t := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		p := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		p.Partition = 0 // no replicas: cancel a reassignment
		t.Topic, t.Partitions = topic, append(t.Partitions, p)
		r.Topics, r.TimeoutMillis = append(r.Topics, t), ms
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, t := range resp.(*kmsg.AlterPartitionAssignmentsResponse).Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
		return codes
	}},
	{kmsg.ListPartitionReassignments, func(_ string, ms int32) kmsg.Request {
		r := kmsg.NewPtrListPartitionReassignmentsRequest()
		r.TimeoutMillis = ms
		return r
	}, func(resp kmsg.Response) []int16 {
		return []int16{resp.(*kmsg.ListPartitionReassignmentsResponse).ErrorCode}
	}},
	{kmsg.DescribeQuorum, func(string, int32) kmsg.Request {
		r := kmsg.NewPtrDescribeQuorumRequest()
		t := kmsg.NewDescribeQuorumRequestTopic()
		t.Topic, t.Partitions = controller.MetadataTopic, []kmsg.DescribeQuorumRequestTopicPartition{kmsg.NewDescribeQuorumRequestTopicPartition()}
		r.Topics = append(r.Topics, t)
		return r
	}, func(resp kmsg.Response) []int16 {
		return []int16{resp.(*kmsg.DescribeQuorumResponse).ErrorCode}
	}},
	{kmsg.DeleteTopics, func(topic string, ms int32) kmsg.Request {
		r := kmsg.NewPtrDeleteTopicsRequest()
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = kmsg.StringPtr(topic)
		r.Topics, r.TimeoutMillis = append(r.Topics, t), ms // v6: by name or id
		return r
	}, func(resp kmsg.Response) (codes []int16) {
		for _, t := range resp.(*kmsg.DeleteTopicsResponse).Topics {
			codes = append(codes, t.ErrorCode)
		}
		return codes
	}},
}

// TestForwardCasesCoverForwardedAPIs: the two tests below send every
// forwarded API.
func TestForwardCasesCoverForwardedAPIs(t *testing.T) {
	covered := map[int16]bool{}
	for _, c := range forwardCases {
		covered[c.key.Int16()] = true
		if a := apis[c.key.Int16()]; a == nil || !a.forwarded {
			t.Errorf("%s is not forwarded", kmsg.NameForKey(c.key.Int16()))
		}
	}
	for key, a := range apis {
		if a.forwarded && !covered[key] {
			t.Errorf("%s is forwarded but has no case in forwardCases", kmsg.NameForKey(key))
		}
	}
}

// reserveAddr returns a free loopback address for a listener.
func reserveAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestForwardedWithoutController: a broker whose only controller is gone
// answers each forwarded API, once the request's timeout (or
// request.timeout.ms) passes, NOT_CONTROLLER for every resource it names:
// never an empty body, which clients would not retry.
func TestForwardedWithoutController(t *testing.T) {
	ctrl := reserveAddr(t)
	settings := func(id int, roles string) map[string]string {
		s := map[string]string{
			"node.id":                              strconv.Itoa(id),
			"process.roles":                        roles,
			"controller.quorum.voters":             "1@" + ctrl,
			"listeners":                            "PLAINTEXT://127.0.0.1:0",
			"broker.heartbeat.interval.ms":         "250",
			"broker.session.timeout.ms":            "2000",
			"controller.quorum.request.timeout.ms": "300",
			"request.timeout.ms":                   "1500",
		}
		if roles != "broker" {
			s["listeners"] += ",CONTROLLER://" + ctrl
		}
		return s
	}
	nodes := startNodes(t, []map[string]string{settings(1, "broker,controller"), settings(2, "broker")})
	if err := nodes[0].Close(); err != nil {
		t.Fatal(err)
	}
	addr := nodes[1].Addr()
	for _, c := range forwardCases {
		t.Run(kmsg.NameForKey(c.key.Int16()), func(t *testing.T) {
			t.Parallel()
			req := c.req("orphan", 1500)
			req.SetVersion(apis[c.key.Int16()].max)
			start := time.Now()
			resp := rawRequest(t, addr, req)
			codes := c.codes(resp)
			if len(codes) == 0 {
				t.Fatalf("after %v: an answer without a resource: %+v", time.Since(start), resp)
			}
			for _, code := range codes {
				if code != kerr.NotController.Code {
					t.Errorf("after %v: %v, want NOT_CONTROLLER: %+v", time.Since(start), kerr.ErrorForCode(code), resp)
				}
			}
		})
	}
}

// TestForwardedRetriedAtActiveController: a broker that is no voter, whose
// view of the metadata quorum is stale (its metadata fetches are held in a
// proxy while the leadership moves to another voter), sends each
// forwarded API first to the old leader; that voter answers
// NOT_CONTROLLER (DescribeQuorum: NOT_LEADER_OR_FOLLOWER), and the broker
// tries the other voters until the active controller answers, which the
// client then gets.
func TestForwardedRetriedAtActiveController(t *testing.T) {
	var voters, proxied []string
	ctrl := make([]string, 3)
	proxies := make([]*faultproxy.Proxy, 3)
	for i := range ctrl {
		ctrl[i] = reserveAddr(t)
		p, err := faultproxy.Listen(faultproxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.SetTarget(ctrl[i])
		proxies[i] = p
		voters = append(voters, strconv.Itoa(i+1)+"@"+ctrl[i])
		proxied = append(proxied, strconv.Itoa(i+1)+"@"+p.Addr())
	}
	var settings []map[string]string
	for id := 1; id <= 4; id++ {
		s := map[string]string{
			"node.id":                               strconv.Itoa(id),
			"process.roles":                         "broker,controller",
			"controller.quorum.voters":              strings.Join(voters, ","),
			"listeners":                             "PLAINTEXT://127.0.0.1:0",
			"broker.heartbeat.interval.ms":          "250",
			"controller.quorum.election.timeout.ms": "500",
			"offsets.topic.replication.factor":      "1",
		}
		if id <= 3 {
			s["listeners"] += ",CONTROLLER://" + ctrl[id-1]
		} else {
			// The broker reaches the voters through the proxies.
			s["process.roles"], s["controller.quorum.voters"] = "broker", strings.Join(proxied, ",")
		}
		settings = append(settings, s)
	}
	nodes := startNodes(t, settings)
	observer := nodes[3]
	active := func() int32 {
		for _, n := range nodes[:3] {
			if l, active := n.controller.Leader(); active {
				return l
			}
		}
		return -1
	}
	poll.Until(t, 30*time.Second, "the broker following the active controller", func() bool {
		l, _ := observer.controller.Leader()
		return l >= 0 && l == active()
	})
	old := active()

	// Freeze the broker's view: hold its next metadata fetches.
	var holds []*faultproxy.Hold
	for _, p := range proxies {
		for range 20 {
			holds = append(holds, p.HoldRequest(kmsg.Fetch.Int16()))
		}
	}
	t.Cleanup(func() {
		for _, h := range holds {
			h.Release()
		}
	})
	select {
	case <-holds[20*(old-1)].Arrived():
	case <-time.After(30 * time.Second):
		t.Fatal("the broker sent the old leader no metadata fetch")
	}
	ctx := testContext(t)
	if err := nodes[old-1].quorum.TransferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "another active controller", func() bool { l := active(); return l >= 0 && l != old })
	if l, _ := observer.controller.Leader(); l != old {
		t.Fatalf("the broker's view moved on to %d: the test would not send to a stale controller", l)
	}

	for _, c := range forwardCases {
		name := kmsg.NameForKey(c.key.Int16())
		// A short timeout: the broker waits for its own (frozen) image to
		// show created and deleted topics until then, and answers anyway.
		req := c.req("retried", 3000)
		req.SetVersion(apis[c.key.Int16()].max)
		resp := rawRequest(t, observer.Addr(), req)
		codes := c.codes(resp)
		if len(codes) == 0 {
			t.Errorf("%s: an answer without a resource: %+v", name, resp)
		}
		if notController(req, resp) {
			t.Errorf("%s: the broker relayed a stale controller's answer: %+v", name, resp)
			continue
		}
		if r, ok := resp.(*kmsg.DeleteACLsResponse); ok && (len(r.Results) != 1 || len(r.Results[0].MatchingACLs) != 1) {
			t.Errorf("DeleteACLs: %+v, want the ACL CreateACLs created", r)
		}
		switch c.key {
		case kmsg.ElectLeaders, kmsg.AlterPartitionAssignments:
			// The topic's only replica leads it and nothing is being
			// reassigned: ELECTION_NOT_NEEDED, NO_REASSIGNMENT_IN_PROGRESS.
			continue
		}
		for _, code := range codes {
			if code != 0 {
				t.Errorf("%s: %v: %+v", name, kerr.ErrorForCode(code), resp)
			}
		}
	}
	if l, _ := observer.controller.Leader(); l != old {
		t.Errorf("the broker's view moved on to %d while the requests were sent", l)
	}
}
