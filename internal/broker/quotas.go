package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quota"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeClientQuotas: v0-1, from the metadata image. AlterClientQuotas:
// v0-1, forwarded to the active controller, which writes ClientQuota
// records; every node applies them. Entity types user and client-id, keys
// producer_byte_rate, consumer_byte_rate and request_percentage. Describing
// needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (authz.go).
//
// Enforcement is Kafka's: a produce request's size, the bytes a consumer's
// fetch response carries, and the time any request spends in Handle (the
// broker's handler; Kafka's request-thread time, see package quota) are
// added to the rate of the quota entity that applies to the connection's
// user and client id (the most specific of user+client-id, user,
// client-id, with <default> entities filling in, in Kafka's order); over a
// quota, the response carries throttle_time_ms (the largest of the
// quotas') and the connection is muted for that long (KIP-219).
// Followers' fetches are not counted. Exempt from request_percentage, as
// in Kafka: produce with acks=0 (there is no response to carry the
// throttle), and the inter-broker forms of requests (follower Fetch and
// OffsetForLeaderEpoch, WriteTxnMarkers, AddPartitionsToTxn v4+) from a
// principal allowed CLUSTER_ACTION; without it they count like any
// other, so that a client cannot evade its quota by posing as a broker.
// The controller listener's requests are not counted: only brokers send
// them. Time a deferred response waits (for replication, fetch.min.bytes)
// is not handler time, as Kafka's purgatory time is not.
func init() {
	register(kmsg.DescribeClientQuotas.Int16(), 0, 1, (*Broker).handleDescribeClientQuotas)
	registerAdmin(kmsg.AlterClientQuotas.Int16(), 0, 1, (*Broker).handleAlterClientQuotas)
}

var quotaKeys = []string{quota.ProducerByteRate, quota.ConsumerByteRate, quota.RequestPercentage}

// entityOf reads a request's entity components.
func entityOf(types []string, names []*string) (metadata.QuotaEntity, error) {
	var e metadata.QuotaEntity
	for i, typ := range types {
		name := names[i]
		switch typ {
		case "user":
			if e.HasUser {
				return e, fmt.Errorf("%w: user given twice", kerr.InvalidRequest)
			}
			e.HasUser, e.UserDefault = true, name == nil
			if name != nil {
				e.User = *name
			}
		case "client-id":
			if e.HasClient {
				return e, fmt.Errorf("%w: client-id given twice", kerr.InvalidRequest)
			}
			e.HasClient, e.ClientDefault = true, name == nil
			if name != nil {
				e.ClientID = *name
			}
		default:
			return e, fmt.Errorf("%w: entity type %q (user, client-id)", kerr.InvalidRequest, typ)
		}
	}
	if !e.HasUser && !e.HasClient {
		return e, fmt.Errorf("%w: empty entity", kerr.InvalidRequest)
	}
	return e, nil
}

func (b *Broker) handleAlterClientQuotas(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AlterClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		for _, entry := range r.Entries {
			out := kmsg.NewAlterClientQuotasResponseEntry()
			var types []string
			var names []*string
			for _, c := range entry.Entity {
				types, names = append(types, c.Type), append(names, c.Name)
				oe := kmsg.NewAlterClientQuotasResponseEntryEntity()
				oe.Type, oe.Name = c.Type, c.Name
				out.Entity = append(out.Entity, oe)
			}
			err := b.alterQuotaEntry(ctx, types, names, entry.Ops, r.ValidateOnly)
			out.ErrorCode, out.ErrorMessage = errorCode(err), errorMessage(err)
			resp.Entries = append(resp.Entries, out)
		}
		return resp
	})
}

func (b *Broker) alterQuotaEntry(ctx context.Context, types []string, names []*string, ops []kmsg.AlterClientQuotasRequestEntryOp, validateOnly bool) error {
	entity, err := entityOf(types, names)
	if err != nil {
		return err
	}
	var changes []controller.QuotaChange
	for _, op := range ops {
		if !slices.Contains(quotaKeys, op.Key) {
			return fmt.Errorf("%w: quota key %q (%v)", kerr.InvalidRequest, op.Key, quotaKeys)
		}
		if op.Remove {
			changes = append(changes, controller.QuotaChange{Key: op.Key})
			continue
		}
		if op.Value <= 0 {
			return fmt.Errorf("%w: %s must be positive", kerr.InvalidRequest, op.Key)
		}
		v := op.Value
		changes = append(changes, controller.QuotaChange{Key: op.Key, Value: &v})
	}
	return b.controller.AlterClientQuotas(ctx, entity, changes, validateOnly)
}

func (b *Broker) handleDescribeClientQuotas(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	img := b.image.Load()
	entities := slices.SortedFunc(maps.Keys(img.ClientQuotas), func(a, b metadata.QuotaEntity) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	for _, c := range r.Components {
		if c.EntityType != "user" && c.EntityType != "client-id" {
			resp.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("entity type %q (user, client-id)", c.EntityType)
			resp.ErrorMessage = &msg
			return respond(resp)
		}
	}
	for _, e := range entities {
		if !quotaMatches(e, r.Components, r.Strict) {
			continue
		}
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		add := func(typ string, def bool, name string) {
			ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ee.Type = typ
			if !def {
				n := name
				ee.Name = &n
			}
			entry.Entity = append(entry.Entity, ee)
		}
		if e.HasUser {
			add("user", e.UserDefault, e.User)
		}
		if e.HasClient {
			add("client-id", e.ClientDefault, e.ClientID)
		}
		for _, k := range slices.Sorted(maps.Keys(img.ClientQuotas[e])) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, img.ClientQuotas[e][k]
			entry.Values = append(entry.Values, v)
		}
		resp.Entries = append(resp.Entries, entry)
	}
	return respond(resp)
}

// quotaMatches applies DescribeClientQuotas' filter: each component
// matches an exact name (0), the default (1) or any entity of its type
// (2); with strict, the entity has no other types.
func quotaMatches(e metadata.QuotaEntity, components []kmsg.DescribeClientQuotasRequestComponent, strict bool) bool {
	seenUser, seenClient := false, false
	for _, c := range components {
		has, def, name := e.HasUser, e.UserDefault, e.User
		if c.EntityType == "client-id" {
			has, def, name = e.HasClient, e.ClientDefault, e.ClientID
			seenClient = true
		} else {
			seenUser = true
		}
		if !has {
			return false
		}
		switch c.MatchType {
		case 0:
			if def || c.Match == nil || *c.Match != name {
				return false
			}
		case 1:
			if !def {
				return false
			}
		}
	}
	if strict && ((e.HasUser && !seenUser) || (e.HasClient && !seenClient)) {
		return false
	}
	return true
}

// quotaFor returns the quota of key that applies to user and clientID,
// and the entity it belongs to (whose rate is shared by every client it
// covers), in Kafka's order of precedence.
func quotaFor(img *metadata.Image, key, user, clientID string) (float64, string, bool) {
	if len(img.ClientQuotas) == 0 {
		return 0, "", false
	}
	u := metadata.QuotaEntity{HasUser: true, User: user}
	ud := metadata.QuotaEntity{HasUser: true, UserDefault: true}
	withClient := func(e metadata.QuotaEntity, def bool) metadata.QuotaEntity {
		e.HasClient, e.ClientDefault = true, def
		if !def {
			e.ClientID = clientID
		}
		return e
	}
	order := []metadata.QuotaEntity{
		withClient(u, false), withClient(u, true), u,
		withClient(ud, false), withClient(ud, true), ud,
		{HasClient: true, ClientID: clientID}, {HasClient: true, ClientDefault: true},
	}
	for _, e := range order {
		if v, ok := img.ClientQuotas[e][key]; ok {
			// A default entity's rate is each user's or client's own.
			entity := e
			if e.UserDefault {
				entity.User = user
			}
			if e.ClientDefault {
				entity.ClientID = clientID
			}
			return v, entity.String(), true
		}
	}
	return 0, "", false
}

// handleTimed runs h for req and, when a request_percentage quota applies
// to the connection, counts the time it took against it.
func (b *Broker) handleTimed(ctx context.Context, c *wire.Conn, s *session, req *wire.Request, h handler) wire.Response {
	img := b.image.Load()
	if len(img.ClientQuotas) == 0 || b.requestQuotaExempt(s, req) {
		return b.authorize(ctx, c, s, req, h)
	}
	limit, entity, ok := quotaFor(img, quota.RequestPercentage, s.principal.Name, req.ClientID)
	if !ok {
		return b.authorize(ctx, c, s, req, h)
	}
	start := time.Now()
	resp := b.authorize(ctx, c, s, req, h)
	end := time.Now()
	return b.throttle(c, resp, b.quotas.RecordRequestTime(entity, end.Sub(start), limit, end))
}

// requestQuotaExempt reports the requests request_percentage does not
// count: see the file's doc.
func (b *Broker) requestQuotaExempt(s *session, req *wire.Request) bool {
	interBroker := false
	switch r := req.Body.(type) {
	case *kmsg.ProduceRequest:
		return r.Acks == 0
	case *kmsg.FetchRequest:
		interBroker = r.ReplicaID >= 0 || r.ReplicaState.ID >= 0
	case *kmsg.OffsetForLeaderEpochRequest:
		interBroker = r.ReplicaID >= 0
	case *kmsg.WriteTxnMarkersRequest:
		interBroker = true
	case *kmsg.AddPartitionsToTxnRequest:
		interBroker = r.Version >= 4
	}
	return interBroker && b.mayClusterAction(s.principal, s.host)
}

// enforceQuota counts a produce or consumer fetch against its quota and,
// over it, sets the response's throttle and mutes the connection.
func (b *Broker) enforceQuota(c *wire.Conn, s *session, req *wire.Request, resp wire.Response) wire.Response {
	img := b.image.Load()
	if len(img.ClientQuotas) == 0 {
		return resp
	}
	switch r := req.Body.(type) {
	case *kmsg.ProduceRequest:
		limit, entity, ok := quotaFor(img, quota.ProducerByteRate, s.principal.Name, req.ClientID)
		if !ok {
			return resp
		}
		d := b.quotas.Record(quota.ProducerByteRate, entity, int64(req.Size), limit, time.Now())
		return b.throttle(c, resp, d)
	case *kmsg.FetchRequest:
		if r.ReplicaID >= 0 || r.ReplicaState.ID >= 0 {
			return resp
		}
		limit, entity, ok := quotaFor(img, quota.ConsumerByteRate, s.principal.Name, req.ClientID)
		if !ok {
			return resp
		}
		count := func(out wire.Response) wire.Response {
			var n int64
			for _, sp := range out.Splices {
				n += sp.Region.Len
			}
			return b.throttle(c, out, b.quotas.Record(quota.ConsumerByteRate, entity, n, limit, time.Now()))
		}
		if resp.Deferred != nil {
			deferred := resp.Deferred
			resp.Deferred = func() wire.Response { return count(deferred()) }
			return resp
		}
		return count(resp)
	}
	return resp
}

// throttle puts d in the response's throttle_time_ms, unless it holds a
// longer one, and mutes c for d.
func (b *Broker) throttle(c *wire.Conn, resp wire.Response, d time.Duration) wire.Response {
	if d <= 0 {
		return resp
	}
	c.Throttle(d)
	ms := int32(d / time.Millisecond)
	return fixResponse(resp, func(body kmsg.Response) {
		get, ok := body.(kmsg.ThrottleResponse)
		set, ok2 := body.(kmsg.SetThrottleResponse)
		if ok && ok2 {
			if cur, _ := get.Throttle(); cur < ms {
				set.SetThrottle(ms)
			}
		}
	})
}
