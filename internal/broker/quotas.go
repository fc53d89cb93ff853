package broker

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quota"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeClientQuotas: v0-1, from the metadata image. AlterClientQuotas:
// v0-1, forwarded to the active controller, which writes ClientQuota
// records; every node applies them. Entity types user and client-id, keys
// producer_byte_rate, consumer_byte_rate and request_percentage; entity
// type ip (alone, a literal address or the default), key
// connection_creation_rate (an integer), as Kafka's QuotaConfigs has them.
// Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS
// (authz.go).
//
// connection_creation_rate is enforced at accept, on the client listeners
// (KIP-612's per-IP rate, as Kafka's ConnectionQuotas does it): a new
// connection counts against its address's ip entity, or the default ip
// entity's rate for that address; over the quota it is held unread for
// the time that brings the rate back (at most one window) and closed.
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
	register(api{key: kmsg.DescribeClientQuotas, min: 0, max: 1, handle: (*Broker).handleDescribeClientQuotas,
		authorize: clusterRule(auth.OpDescribeConfigs), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeClientQuotasResponse).ErrorCode = code
		}})
	register(api{key: kmsg.AlterClientQuotas, min: 0, max: 1, handle: (*Broker).handleAlterClientQuotas, forwarded: true,
		authorize: clusterRule(auth.OpAlterConfigs), errors: alterClientQuotasErrors, quota: requestTime})
}

// quotaKeys are the keys of user and client-id entities, ipQuotaKeys
// those of ip entities, as Kafka's QuotaConfigs has them.
var (
	quotaKeys   = []string{quota.ProducerByteRate, quota.ConsumerByteRate, quota.RequestPercentage}
	ipQuotaKeys = []string{quota.ConnectionCreationRate}
)

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
		case "ip":
			if e.HasIP {
				return e, fmt.Errorf("%w: ip given twice", kerr.InvalidRequest)
			}
			e.HasIP, e.IPDefault = true, name == nil
			if name != nil {
				ip := net.ParseIP(*name)
				if ip == nil {
					return e, fmt.Errorf("%w: ip %q is not an IP address", kerr.InvalidRequest, *name)
				}
				e.IP = ip.String()
			}
		default:
			return e, fmt.Errorf("%w: entity type %q (user, client-id, ip)", kerr.InvalidRequest, typ)
		}
	}
	switch {
	case !e.HasUser && !e.HasClient && !e.HasIP:
		return e, fmt.Errorf("%w: empty entity", kerr.InvalidRequest)
	case e.HasIP && (e.HasUser || e.HasClient):
		return e, fmt.Errorf("%w: an ip entity cannot be combined with user or client-id", kerr.InvalidRequest)
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
	keys := quotaKeys
	if entity.HasIP {
		keys = ipQuotaKeys
	}
	for _, op := range ops {
		if !slices.Contains(keys, op.Key) {
			return fmt.Errorf("%w: quota key %q for entity %s (%v)", kerr.InvalidRequest, op.Key, entity, keys)
		}
		if op.Remove {
			changes = append(changes, controller.QuotaChange{Key: op.Key})
			continue
		}
		if op.Value <= 0 {
			return fmt.Errorf("%w: %s must be positive", kerr.InvalidRequest, op.Key)
		}
		if op.Key == quota.ConnectionCreationRate && op.Value != math.Trunc(op.Value) {
			return fmt.Errorf("%w: %s must be an integer", kerr.InvalidRequest, op.Key)
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
		if c.EntityType != "user" && c.EntityType != "client-id" && c.EntityType != "ip" {
			resp.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("entity type %q (user, client-id, ip)", c.EntityType)
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
		if e.HasIP {
			add("ip", e.IPDefault, e.IP)
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
	seenUser, seenClient, seenIP := false, false, false
	for _, c := range components {
		has, def, name := e.HasUser, e.UserDefault, e.User
		switch c.EntityType {
		case "client-id":
			has, def, name = e.HasClient, e.ClientDefault, e.ClientID
			seenClient = true
		case "ip":
			has, def, name = e.HasIP, e.IPDefault, e.IP
			seenIP = true
			if c.Match != nil {
				if ip := net.ParseIP(*c.Match); ip != nil {
					m := ip.String()
					c.Match = &m
				}
			}
		default:
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
	if strict && ((e.HasUser && !seenUser) || (e.HasClient && !seenClient) || (e.HasIP && !seenIP)) {
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

// quotaRule is how client quotas count one API's requests (api.quota);
// see the file's doc.
type quotaRule struct {
	// bytes is the byte rate the API's data counts against:
	// quota.ProducerByteRate (the request's size),
	// quota.ConsumerByteRate (the records the response carries), or ""
	// for none.
	bytes string
	// exempt says how request_percentage counts a request; nil: counted.
	exempt func(req kmsg.Request) exemption
}

// exemption is how request_percentage counts a request.
type exemption int8

const (
	counted exemption = iota
	// uncounted: never counted.
	uncounted
	// interBroker: a broker's request, counted only when its principal
	// may not CLUSTER_ACTION; its data counts against no byte rate.
	interBroker
)

// requestTime is the quota rule of most APIs: request_percentage counts
// their handler's time.
var requestTime = &quotaRule{}

// handleTimed runs a's handler for req, authorized, and, when a
// request_percentage quota applies to the connection, counts the time it
// took against it.
func (b *Broker) handleTimed(ctx context.Context, c *wire.Conn, s *session, a *api, req *wire.Request) wire.Response {
	img := b.image.Load()
	if len(img.ClientQuotas) == 0 || b.requestQuotaExempt(s, a, req) {
		return b.authorize(ctx, c, s, a, req)
	}
	limit, entity, ok := quotaFor(img, quota.RequestPercentage, s.principal.Name, req.ClientID)
	if !ok {
		return b.authorize(ctx, c, s, a, req)
	}
	start := time.Now()
	resp := b.authorize(ctx, c, s, a, req)
	end := time.Now()
	return b.throttle(c, resp, b.quotas.RecordRequestTime(entity, end.Sub(start), limit, end))
}

// requestQuotaExempt reports the requests request_percentage does not
// count: see the file's doc.
func (b *Broker) requestQuotaExempt(s *session, a *api, req *wire.Request) bool {
	if a.quota.exempt == nil {
		return false
	}
	switch a.quota.exempt(req.Body) {
	case uncounted:
		return true
	case interBroker:
		return b.mayClusterAction(s.principal, s.host)
	}
	return false
}

// connectionThrottle is wire's Config.ConnectionThrottle: a new
// connection from ip counts against the connection_creation_rate of its
// ip entity, or of the default ip entity (each IP its own rate), as
// Kafka's ConnectionQuotas resolves it.
func (b *Broker) connectionThrottle(ip string) time.Duration {
	img := b.image.Load()
	if img == nil || len(img.ClientQuotas) == 0 {
		return 0
	}
	limit, ok := img.ClientQuotas[metadata.QuotaEntity{HasIP: true, IP: ip}][quota.ConnectionCreationRate]
	if !ok {
		if limit, ok = img.ClientQuotas[metadata.QuotaEntity{HasIP: true, IPDefault: true}][quota.ConnectionCreationRate]; !ok {
			return 0
		}
	}
	return b.quotas.RecordConnection(ip, limit, time.Now())
}

// enforceQuota counts a request's data against its API's byte rate (a
// produce's size, the records of a consumer's fetch) and, over the quota,
// sets the response's throttle and mutes the connection.
func (b *Broker) enforceQuota(c *wire.Conn, s *session, a *api, req *wire.Request, resp wire.Response) wire.Response {
	if a.quota.bytes == "" {
		return resp
	}
	img := b.image.Load()
	if len(img.ClientQuotas) == 0 || a.quota.exempt != nil && a.quota.exempt(req.Body) == interBroker {
		return resp
	}
	limit, entity, ok := quotaFor(img, a.quota.bytes, s.principal.Name, req.ClientID)
	if !ok {
		return resp
	}
	if a.quota.bytes == quota.ProducerByteRate {
		d := b.quotas.Record(quota.ProducerByteRate, entity, int64(req.Size), limit, time.Now())
		return b.throttle(c, resp, d)
	}
	count := func(out wire.Response) wire.Response {
		var n int64
		for _, sp := range out.Splices {
			n += sp.Region.Len
		}
		return b.throttle(c, out, b.quotas.Record(a.quota.bytes, entity, n, limit, time.Now()))
	}
	if resp.Deferred != nil {
		deferred := resp.Deferred
		resp.Deferred = func() wire.Response { return count(deferred()) }
		return resp
	}
	return count(resp)
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

// alterClientQuotasErrors answers each entry req names with code.
func alterClientQuotasErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.AlterClientQuotasResponse)
	for _, e := range req.(*kmsg.AlterClientQuotasRequest).Entries {
		oe := kmsg.NewAlterClientQuotasResponseEntry()
		oe.ErrorCode = code
		for _, c := range e.Entity {
			ee := kmsg.NewAlterClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = c.Type, c.Name
			oe.Entity = append(oe.Entity, ee)
		}
		out.Entries = append(out.Entries, oe)
	}
}
