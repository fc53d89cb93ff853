package controller

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// clusterScript runs the broker lifecycle's planners over an image and a
// manual clock. Commands:
//
//	topic name=T p0=1,2,3 p1=2,3,1 [min-isr=N] [unclean]
//	                                    create a topic (leader: first replica)
//	config [topic=T] key=K [value=V]    set (or remove) a topic's or the cluster's setting
//	register id=N [incarnation=S] [host=H] [unclean]
//	                                    unclean: after an unclean shutdown
//	heartbeat id=N epoch=E offset=O [shutdown] [fence]
//	tick advance=D [alive=1,2]          advance the clock (the brokers alive heartbeat), fence expired sessions
//	alter topic=T partition=P leader=N epoch=E pepoch=P isr=1,2 [broker-epoch=E]
//	auto-rebalance interval=D percent=N  check the leaders' balance every D at ticks
//	elect [unclean] [topic=T partition=P] ElectLeaders (no topic: every partition)
//	controller-failover [on=N]          forget heartbeat times (a new active controller, on node N)
//	show                                brokers and partitions
//
// Each command prints the records it commits (applied to the image) and its
// answer.
type clusterScript struct {
	img    *metadata.Image
	live   *liveness
	now    time.Time
	uuid   map[string]metadata.UUID
	self   int32 // the active controller's node id
	policy Policy
	// rebalance and rebalancePercent are the automatic preferred-leader
	// election's, when auto-rebalance set them.
	rebalance        *rebalanceClock
	rebalancePercent int
}

func TestClusterScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/cluster", func(t *testing.T, path string) {
		img, err := metadata.Empty().Apply(0, metadata.Record{Cluster: &metadata.ClusterRecord{ClusterID: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		s := newClusterScript(img)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return s.run(t, d) })
	})
}

func newClusterScript(img *metadata.Image) *clusterScript {
	return &clusterScript{img: img, live: newLiveness(9 * time.Second), self: -1,
		now: time.Unix(1_700_000_000, 0), uuid: map[string]metadata.UUID{}, policy: Policy{MinInsyncReplicas: 1}}
}

func (s *clusterScript) run(t *testing.T, d *datadriven.TestData) string {
	var records []metadata.Record
	var answer string
	var err error
	switch d.Cmd {
	case "topic":
		var name string
		d.ScanArgs(t, "name", &name)
		id := metadata.UUID{15: byte(len(s.img.Topics) + 2)}
		records = append(records, metadata.Record{Topic: &metadata.TopicRecord{Name: name, ID: id}})
		for p := 0; d.HasArg("p" + strconv.Itoa(p)); p++ {
			replicas := ints(t, d, "p"+strconv.Itoa(p))
			records = append(records, metadata.Record{Partition: &metadata.PartitionRecord{
				TopicID: id, Partition: int32(p), Replicas: replicas, ISR: slices.Clone(replicas), Leader: replicas[0]}})
		}
		setting := func(key, value string) {
			records = append(records, metadata.Record{Config: &metadata.ConfigRecord{ResourceType: metadata.ResourceTopic, ResourceName: name, Name: key, Value: &value}})
		}
		if d.HasArg("min-isr") {
			setting("min.insync.replicas", strconv.Itoa(intArg(t, d, "min-isr")))
		}
		if d.HasArg("unclean") {
			setting("unclean.leader.election.enable", "true")
		}
	case "config":
		rec := &metadata.ConfigRecord{ResourceType: metadata.ResourceBroker}
		if d.HasArg("topic") {
			rec.ResourceType = metadata.ResourceTopic
			d.ScanArgs(t, "topic", &rec.ResourceName)
		}
		d.ScanArgs(t, "key", &rec.Name)
		if d.HasArg("value") {
			var v string
			d.ScanArgs(t, "value", &v)
			rec.Value = &v
		}
		records = append(records, metadata.Record{Config: rec})
	case "register":
		host := "localhost"
		if d.HasArg("host") {
			d.ScanArgs(t, "host", &host)
		}
		reg := Registration{NodeID: int32(intArg(t, d, "id")), Listeners: []metadata.Endpoint{{Name: "PLAINTEXT", Host: host, Port: 9092}}}
		inc := "first"
		if d.HasArg("incarnation") {
			d.ScanArgs(t, "incarnation", &inc)
		}
		if _, ok := s.uuid[inc]; !ok {
			s.uuid[inc] = metadata.UUID{0: byte(len(s.uuid) + 1)}
		}
		reg.IncarnationID = s.uuid[inc]
		reg.PreviousBrokerEpoch = -1
		if b, ok := s.img.Brokers[reg.NodeID]; ok && !d.HasArg("unclean") {
			reg.PreviousBrokerEpoch = b.Epoch
		}
		var epoch int64
		records, epoch, err = planRegister(s.img, s.policy, s.live, reg, s.now, s.self)
		answer = fmt.Sprintf("epoch=%d", epoch)
	case "heartbeat":
		hb := Heartbeat{NodeID: int32(intArg(t, d, "id")), Epoch: int64(intArg(t, d, "epoch")), MetadataOffset: int64(intArg(t, d, "offset")),
			WantShutDown: d.HasArg("shutdown"), WantFence: d.HasArg("fence")}
		var reply HeartbeatReply
		records, reply, err = planHeartbeat(s.img, s.policy, s.live, hb, s.now)
		answer = fmt.Sprintf("caught-up=%t fenced=%t shutdown=%t", reply.IsCaughtUp, reply.IsFenced, reply.ShouldShutDown)
	case "tick":
		var advance string
		d.ScanArgs(t, "advance", &advance)
		dur, perr := time.ParseDuration(advance)
		if perr != nil {
			t.Fatal(perr)
		}
		s.now = s.now.Add(dur)
		if d.HasArg("alive") {
			for _, id := range ints(t, d, "alive") {
				s.live.lastSeen[id] = s.now
			}
		}
		records = planFenceExpired(s.img, s.policy, s.live, s.now)
		if s.rebalance != nil && s.rebalance.due(s.now) {
			next, aerr := s.img.Apply(s.img.Offset+1, records...)
			if aerr != nil {
				t.Fatal(aerr)
			}
			records = append(records, planRebalance(next, s.policy, s.rebalancePercent)...)
		}
	case "auto-rebalance":
		var interval string
		d.ScanArgs(t, "interval", &interval)
		dur, perr := time.ParseDuration(interval)
		if perr != nil {
			t.Fatal(perr)
		}
		s.rebalance, s.rebalancePercent = &rebalanceClock{interval: dur}, intArg(t, d, "percent")
		s.rebalance.due(s.now)
	case "elect":
		var targets []ElectTarget
		if d.HasArg("topic") {
			var target ElectTarget
			d.ScanArgs(t, "topic", &target.Topic)
			target.Partition = int32(intArg(t, d, "partition"))
			targets = append(targets, target)
		}
		var results []ElectResult
		records, results = planElectLeaders(s.img, s.policy, d.HasArg("unclean"), targets)
		var lines []string
		for _, r := range results {
			code := "ok"
			var ke *kerr.Error
			if errors.As(r.Err, &ke) {
				code = ke.Message
			}
			lines = append(lines, fmt.Sprintf("%s-%d %s", r.Topic, r.Partition, code))
		}
		answer = strings.Join(lines, "\n")
	case "alter":
		req := PartitionAlter{Leader: int32(intArg(t, d, "leader")), BrokerEpoch: -1, LeaderEpoch: int32(intArg(t, d, "epoch")),
			PartitionEpoch: int32(intArg(t, d, "pepoch")), NewISR: ints(t, d, "isr"), Partition: int32(intArg(t, d, "partition"))}
		d.ScanArgs(t, "topic", &req.Topic)
		if d.HasArg("broker-epoch") {
			req.BrokerEpoch = int64(intArg(t, d, "broker-epoch"))
		}
		var res AlterResult
		records, res, err = planAlterPartition(s.img, s.policy, req)
		answer = fmt.Sprintf("leader=%d leader-epoch=%d partition-epoch=%d isr=%v", res.Leader, res.LeaderEpoch, res.PartitionEpoch, res.ISR)
	case "controller-failover":
		s.live = newLiveness(s.live.sessionTimeout)
		if d.HasArg("on") {
			s.self = int32(intArg(t, d, "on"))
		}
	case "show":
		return s.show()
	default:
		t.Fatalf("unknown command %s", d.Cmd)
	}
	var out strings.Builder
	for _, r := range records {
		out.WriteString(s.describe(r) + "\n")
	}
	if len(records) > 0 {
		img, aerr := s.img.Apply(s.img.Offset+1, records...)
		if aerr != nil {
			t.Fatalf("planned records do not apply: %v", aerr)
		}
		s.img = img
	}
	if err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			answer = "error " + ke.Message
		} else {
			answer = "error " + err.Error()
		}
	}
	if answer != "" {
		out.WriteString(answer + "\n")
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func (s *clusterScript) topicName(id metadata.UUID) string { return s.img.TopicsByID[id].Name }

func (s *clusterScript) describe(r metadata.Record) string {
	switch {
	case r.Topic != nil:
		return "topic " + r.Topic.Name
	case r.Partition != nil:
		p := r.Partition
		return fmt.Sprintf("partition %s-%d replicas=%v leader=%d", s.topicNameOrPending(p.TopicID), p.Partition, p.Replicas, p.Leader)
	case r.Config != nil:
		v := "(removed)"
		if r.Config.Value != nil {
			v = *r.Config.Value
		}
		return fmt.Sprintf("config %d/%q %s=%s", r.Config.ResourceType, r.Config.ResourceName, r.Config.Name, v)
	case r.Broker != nil:
		b := r.Broker
		return fmt.Sprintf("register broker %d epoch=%d fenced=%t", b.NodeID, b.Epoch, b.Fenced)
	case r.BrokerChange != nil:
		c := r.BrokerChange
		var parts []string
		if c.Fenced != nil {
			parts = append(parts, fmt.Sprintf("fenced=%t", *c.Fenced))
		}
		if c.InControlledShutdown != nil {
			parts = append(parts, fmt.Sprintf("shutting-down=%t", *c.InControlledShutdown))
		}
		return fmt.Sprintf("change broker %d epoch=%d %s", c.NodeID, c.Epoch, strings.Join(parts, " "))
	case r.PartitionChange != nil:
		c := r.PartitionChange
		var parts []string
		if c.Leader != nil {
			parts = append(parts, fmt.Sprintf("leader=%d", *c.Leader))
		}
		if c.ISR != nil {
			parts = append(parts, fmt.Sprintf("isr=%v", c.ISR))
		}
		if c.Replicas != nil {
			parts = append(parts, fmt.Sprintf("replicas=%v", c.Replicas))
		}
		if c.AddingReplicas != nil {
			parts = append(parts, fmt.Sprintf("adding=%v", *c.AddingReplicas))
		}
		if c.RemovingReplicas != nil {
			parts = append(parts, fmt.Sprintf("removing=%v", *c.RemovingReplicas))
		}
		if c.ELR != nil {
			parts = append(parts, fmt.Sprintf("elr=%v", c.ELR))
		}
		if c.LastKnownELR != nil {
			parts = append(parts, fmt.Sprintf("last-known-elr=%v", c.LastKnownELR))
		}
		return fmt.Sprintf("change %s-%d %s", s.topicName(c.TopicID), c.Partition, strings.Join(parts, " "))
	}
	return fmt.Sprintf("%+v", r)
}

// topicNameOrPending names a topic the same command creates.
func (s *clusterScript) topicNameOrPending(id metadata.UUID) string {
	if t, ok := s.img.TopicsByID[id]; ok {
		return t.Name
	}
	return "(new)"
}

func (s *clusterScript) show() string {
	var out strings.Builder
	for _, id := range s.img.BrokerIDsAll() {
		b := s.img.Brokers[id]
		fmt.Fprintf(&out, "broker %d epoch=%d fenced=%t shutting-down=%t\n", id, b.Epoch, b.Fenced, b.InControlledShutdown)
	}
	eachPartition(s.img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		fmt.Fprintf(&out, "%s-%d leader=%d leader-epoch=%d partition-epoch=%d isr=%v", t.Name, index, p.Leader, p.LeaderEpoch, p.PartitionEpoch, p.ISR)
		if p.Reassigning() {
			fmt.Fprintf(&out, " replicas=%v adding=%v removing=%v", p.Replicas, p.AddingReplicas, p.RemovingReplicas)
		}
		if len(p.ELR) > 0 || len(p.LastKnownELR) > 0 {
			fmt.Fprintf(&out, " elr=%v last-known-elr=%v", p.ELR, p.LastKnownELR)
		}
		out.WriteString("\n")
	})
	return out.String()
}

func intArg(t *testing.T, d *datadriven.TestData, key string) int {
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func ints(t *testing.T, d *datadriven.TestData, key string) []int32 {
	var s string
	d.ScanArgs(t, key, &s)
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s=%s: %v", key, s, err)
		}
		out = append(out, int32(n))
	}
	return out
}
