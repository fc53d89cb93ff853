package broker

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// Authorization, with authorizer.class.name set: every request of a
// principal that is not a super user goes through its API's rule below
// before (and, for per-resource answers, after) its handler, as KafkaApis
// authorizes it. A rule either answers the whole request with Kafka's
// authorization error, or takes the resources the principal may not touch
// out of the request and puts them back in the response with the error,
// so the handler only sees what is allowed. A topic the principal may not
// DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED whether or not it
// exists, so its existence does not leak. An API without a rule is refused
// by closing the connection (fail closed).
//
// The rules run on the connection's reader goroutine; the authorizer is
// rebuilt from the metadata image's ACLs when they change and read
// through an atomic pointer.

// authzCache holds the authorizer built from one version of the ACLs;
// mu lets one goroutine build the next while the others wait for it (the
// first request of each connection after a change would otherwise each
// build their own).
type authzCache struct {
	mu  sync.Mutex
	cur atomic.Pointer[authzState]
}

type authzState struct {
	version int64
	az      *auth.Authorizer
}

// authorizerNow returns the authorizer for the current image, nil when
// authorization is off.
func (b *Broker) authorizerNow() *auth.Authorizer {
	az, _ := b.authorizerFor(b.image.Load())
	return az
}

// authorizerFor returns the authorizer of img's ACLs and their version,
// nil when authorization is off.
func (b *Broker) authorizerFor(img *metadata.Image) (*auth.Authorizer, int64) {
	if !b.authzOn {
		return nil, 0
	}
	if st := b.authz.cur.Load(); st != nil && st.version == img.AclsVersion {
		return st.az, st.version
	}
	b.authz.mu.Lock()
	defer b.authz.mu.Unlock()
	st := b.authz.cur.Load()
	if st != nil && st.version == img.AclsVersion {
		return st.az, st.version
	}
	// The authorizer indexes the ACLs by resource; its decisions do not
	// depend on their order.
	acls := make([]auth.Acl, 0, len(img.Acls))
	for a := range img.Acls {
		acls = append(acls, toAuthAcl(a))
	}
	az := auth.NewAuthorizer(acls, splitSuperUsers(b.cfg.String("super.users")), b.cfg.Bool("allow.everyone.if.no.acl.found"))
	if st == nil || img.AclsVersion > st.version { // not for an older image still in use
		b.authz.cur.Store(&authzState{version: img.AclsVersion, az: az})
	}
	return az, img.AclsVersion
}

func splitSuperUsers(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ';' {
			if u := s[start:i]; u != "" {
				out = append(out, u)
			}
			start = i + 1
		}
	}
	return out
}

// access is one request's principal and address, checked against the
// authorizer. Rules take it by value, so that it stays off the heap.
type access struct {
	az      *auth.Authorizer
	p       auth.Principal
	subject auth.Subject
	host    string
	img     *metadata.Image
	api     *api // the request's API
}

func (a *access) can(op, rt int8, name string) bool {
	return a.az.Check(a.subject, a.host, op, rt, name)
}
func (a *access) cluster(op int8) bool            { return a.can(op, auth.ResourceCluster, auth.ClusterName) }
func (a *access) topic(op int8, name string) bool { return a.can(op, auth.ResourceTopic, name) }
func (a *access) group(op int8, name string) bool { return a.can(op, auth.ResourceGroup, name) }

// authzRule authorizes one API's request; next is its handler. Each API's
// descriptor names its rule (api.authorize).
type authzRule func(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response

// authorizeNothing is the rule of the APIs any connection may call
// (ApiVersions and the SASL exchange).
func authorizeNothing(b *Broker, _ access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	return next(b, ctx, c, req)
}

// authorize runs the request's rule when authorization is on and the
// principal is not a super user.
func (b *Broker) authorize(ctx context.Context, c *wire.Conn, s *session, a *api, req *wire.Request) wire.Response {
	next := a.clientHandler()
	img := b.image.Load()
	az, version := b.authorizerFor(img)
	if az == nil {
		return next(b, ctx, c, req)
	}
	if s.subjectVersion != version || s.subjectOf != s.principal {
		// Once per connection and change of the ACLs or the principal. The
		// session keeps no authorizer or image: an idle connection holds
		// on to neither.
		s.subject, s.subjectOf, s.subjectVersion = az.Subject(s.principal), s.principal, version
	}
	if s.subject.Super() {
		return next(b, ctx, c, req)
	}
	if a.authorize == nil {
		b.logger.Info("closing connection: no authorization rule for the API", "api", apiName(req.Key), "principal", s.principal, "remote", c.RemoteAddr())
		return wire.Response{NoResponse: true, Close: true}
	}
	return a.authorize(b, access{az: az, p: s.principal, subject: s.subject, host: s.host, img: img, api: a}, ctx, c, req, next)
}

// fixResponse applies fix to the response body the handler returns, now
// or, for a deferred response, when it is ready.
func fixResponse(resp wire.Response, fix func(kmsg.Response)) wire.Response {
	if resp.Deferred != nil {
		deferred := resp.Deferred
		resp.Deferred = func() wire.Response {
			r := deferred()
			if r.Body != nil {
				fix(r.Body)
			}
			return r
		}
		return resp
	}
	if resp.Body != nil {
		fix(resp.Body)
	}
	return resp
}

// refuse answers a whole request with code in each of its entries (the
// API's api.errors), or closes the connection for an API that has no
// such answer (fail closed).
func (a *access) refuse(req *wire.Request, code int16) wire.Response {
	if a.api.errors == nil {
		return wire.Response{NoResponse: true, Close: true}
	}
	return respond(errorAnswer(a.api, req.Body, code))
}

// errorAnswer is the response to req that carries code everywhere (the
// API's api.errors).
func errorAnswer(a *api, req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	a.errors(req, resp, code)
	return resp
}

var (
	topicDenied   = kerr.TopicAuthorizationFailed.Code
	groupDenied   = kerr.GroupAuthorizationFailed.Code
	clusterDenied = kerr.ClusterAuthorizationFailed.Code
	txnDenied     = kerr.TransactionalIDAuthorizationFailed.Code
)

func clusterRule(op int8) authzRule {
	return func(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
		if !a.cluster(op) {
			return a.refuse(req, clusterDenied)
		}
		return next(b, ctx, c, req)
	}
}

// clusterOperations are the operations an ACL on the cluster grants
// (Kafka's AclEntry.supportedOperations(CLUSTER)).
var clusterOperations = []int8{auth.OpCreate, auth.OpClusterAction, auth.OpDescribeConfigs,
	auth.OpAlterConfigs, auth.OpIdempotentWrite, auth.OpAlter, auth.OpDescribe}

// topicOperations and groupOperations are those of ACLs on a topic and
// on a group (AclEntry.supportedOperations).
var (
	topicOperations = []int8{auth.OpRead, auth.OpWrite, auth.OpCreate, auth.OpDescribe, auth.OpDelete,
		auth.OpAlter, auth.OpDescribeConfigs, auth.OpAlterConfigs}
	groupOperations = []int8{auth.OpRead, auth.OpDescribe, auth.OpDelete, auth.OpDescribeConfigs, auth.OpAlterConfigs}
)

// allowAll is the authorized operations' test without authorization or
// for a super user.
func allowAll(int8) bool { return true }

// operationBits is Kafka's authorized-operations bit field: bit op set
// for each of ops that allowed allows.
func operationBits(ops []int8, allowed func(op int8) bool) int32 {
	var bits int32
	for _, op := range ops {
		if allowed(op) {
			bits |= 1 << op
		}
	}
	return bits
}

// authorizeDescribeCluster: DescribeCluster needs no ACL; asked for the
// cluster's authorized operations, it answers those the principal's ACLs
// allow, or none without DESCRIBE on the cluster (AuthHelper.
// computeDescribeClusterResponse).
func authorizeDescribeCluster(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	if !req.Body.(*kmsg.DescribeClusterRequest).IncludeClusterAuthorizedOperations {
		return next(b, ctx, c, req)
	}
	var ops int32
	if a.cluster(auth.OpDescribe) {
		ops = operationBits(clusterOperations, a.cluster)
	}
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		if resp := body.(*kmsg.DescribeClusterResponse); resp.ErrorCode == 0 {
			resp.ClusterAuthorizedOperations = ops
		}
	})
}

func authorizeProduce(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.ProduceRequest)
	if r.TransactionID != nil && !a.can(auth.OpWrite, auth.ResourceTransactionalID, *r.TransactionID) {
		if r.Acks == 0 {
			return wire.Response{NoResponse: true}
		}
		return a.refuse(req, txnDenied)
	}
	kept, denied := split(r.Topics, func(t kmsg.ProduceRequestTopic) bool { return a.topic(auth.OpWrite, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { produceErrors(&denials, body, topicDenied) })
}

func authorizeFetch(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.FetchRequest)
	if r.ReplicaID >= 0 || r.ReplicaState.ID >= 0 {
		// A follower's fetch needs CLUSTER_ACTION.
		if !a.cluster(auth.OpClusterAction) {
			return a.refuse(req, topicDenied)
		}
		return next(b, ctx, c, req)
	}
	name := func(t kmsg.FetchRequestTopic) (string, bool) {
		if r.Version < 13 {
			return t.Topic, true
		}
		if topic, ok := a.img.TopicsByID[t.TopicID]; ok {
			return topic.Name, true
		}
		return "", false // unknown id: the handler says so
	}
	kept, denied := split(r.Topics, func(t kmsg.FetchRequestTopic) bool {
		n, ok := name(t)
		return !ok || a.topic(auth.OpRead, n)
	})
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { fetchErrors(&denials, body, topicDenied) })
}

// authorizeMetadata answers, when asked, the cluster's and the topics'
// authorized operations (KafkaApis.handleTopicMetadataRequest): the
// cluster's are none without DESCRIBE on it; a topic it may not describe
// keeps the schema default.
func authorizeMetadata(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.MetadataRequest)
	includeCluster := r.IncludeClusterAuthorizedOperations && r.Version >= 8 && r.Version <= 10
	resp := authorizeMetadataTopics(b, a, ctx, c, req, next)
	if !includeCluster && !r.IncludeTopicAuthorizedOperations {
		return resp
	}
	return fixResponse(resp, func(body kmsg.Response) {
		resp := body.(*kmsg.MetadataResponse)
		if includeCluster {
			resp.AuthorizedOperations = 0
			if a.cluster(auth.OpDescribe) {
				resp.AuthorizedOperations = operationBits(clusterOperations, a.cluster)
			}
		}
		if r.IncludeTopicAuthorizedOperations {
			for i := range resp.Topics {
				if t := &resp.Topics[i]; t.Topic != nil && t.ErrorCode != topicDenied {
					t.AuthorizedOperations = operationBits(topicOperations, func(op int8) bool { return a.topic(op, *t.Topic) })
				}
			}
		}
	})
}

func authorizeMetadataTopics(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.MetadataRequest)
	if r.Topics == nil {
		// All topics: those it may not describe are left out.
		return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
			resp := body.(*kmsg.MetadataResponse)
			kept := resp.Topics[:0]
			for _, t := range resp.Topics {
				if t.Topic != nil && a.topic(auth.OpDescribe, *t.Topic) {
					kept = append(kept, t)
				}
			}
			resp.Topics = kept
		})
	}
	autoCreate := b.cfg.Bool("auto.create.topics.enable") && (r.Version < 4 || r.AllowAutoTopicCreation)
	var denied []string
	var deniedIDs [][16]byte
	kept := r.Topics[:0:0]
	for _, t := range r.Topics {
		if t.Topic == nil { // by id (v10+)
			// A topic it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
			// with its id and no name, as KafkaApis answers; an unknown id
			// is the handler's to answer.
			if topic, ok := a.img.TopicsByID[metadata.UUID(t.TopicID)]; ok && !a.topic(auth.OpDescribe, topic.Name) {
				deniedIDs = append(deniedIDs, t.TopicID)
				continue
			}
			kept = append(kept, t)
			continue
		}
		name := *t.Topic
		_, exists := a.img.Topics[name]
		switch {
		case !a.topic(auth.OpDescribe, name):
			denied = append(denied, name)
		case !exists && autoCreate && !a.cluster(auth.OpCreate) && !a.topic(auth.OpCreate, name):
			denied = append(denied, name)
		default:
			kept = append(kept, t)
		}
	}
	if len(denied) == 0 && len(deniedIDs) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.MetadataResponse)
		for _, name := range denied {
			t := kmsg.NewMetadataResponseTopic()
			n := name
			t.Topic, t.ErrorCode = &n, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
		for _, id := range deniedIDs {
			t := kmsg.NewMetadataResponseTopic()
			t.TopicID, t.ErrorCode = id, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
	})
}

func authorizeListOffsets(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.ListOffsetsRequest)
	kept, denied := split(r.Topics, func(t kmsg.ListOffsetsRequestTopic) bool { return a.topic(auth.OpDescribe, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { listOffsetsErrors(&denials, body, topicDenied) })
}

func authorizeOffsetForLeaderEpoch(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.OffsetForLeaderEpochRequest)
	if r.ReplicaID >= 0 {
		if !a.cluster(auth.OpClusterAction) {
			return a.refuse(req, clusterDenied)
		}
		return next(b, ctx, c, req)
	}
	kept, denied := split(r.Topics, func(t kmsg.OffsetForLeaderEpochRequestTopic) bool { return a.topic(auth.OpDescribe, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { offsetForLeaderEpochErrors(&denials, body, topicDenied) })
}

func authorizeFindCoordinator(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.FindCoordinatorRequest)
	allowed := func(key string) (bool, int16) {
		if r.CoordinatorType == 1 {
			return a.can(auth.OpDescribe, auth.ResourceTransactionalID, key), txnDenied
		}
		return a.group(auth.OpDescribe, key), groupDenied
	}
	if r.Version < 4 {
		if ok, code := allowed(r.CoordinatorKey); !ok {
			return a.refuse(req, code)
		}
		return next(b, ctx, c, req)
	}
	var denied []string
	var code int16
	kept := r.CoordinatorKeys[:0:0]
	for _, k := range r.CoordinatorKeys {
		ok, cd := allowed(k)
		if ok {
			kept = append(kept, k)
		} else {
			denied, code = append(denied, k), cd
		}
	}
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.CoordinatorKeys = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.FindCoordinatorResponse)
		for _, k := range denied {
			co := kmsg.NewFindCoordinatorResponseCoordinator()
			co.Key, co.NodeID, co.Port, co.ErrorCode = k, -1, -1, code
			resp.Coordinators = append(resp.Coordinators, co)
		}
	})
}

func authorizeInitProducerID(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.InitProducerIDRequest)
	if r.TransactionalID != nil {
		if !a.can(auth.OpWrite, auth.ResourceTransactionalID, *r.TransactionalID) {
			return a.refuse(req, txnDenied)
		}
		return next(b, ctx, c, req)
	}
	// An idempotent producer needs IDEMPOTENT_WRITE on the cluster, or
	// (KIP-679) WRITE on some topic.
	if !a.cluster(auth.OpIdempotentWrite) && !a.az.AllowsAny(a.p, a.host, auth.OpWrite, auth.ResourceTopic) {
		return a.refuse(req, clusterDenied)
	}
	return next(b, ctx, c, req)
}

// authorizeAddPartitionsToTxn: a client's request (v0-3) needs WRITE on
// its transactional id and on each topic; the brokers' batched form (v4)
// CLUSTER_ACTION.
func authorizeAddPartitionsToTxn(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.AddPartitionsToTxnRequest)
	if r.Version >= 4 {
		return clusterRule(auth.OpClusterAction)(b, a, ctx, c, req, next)
	}
	if !a.can(auth.OpWrite, auth.ResourceTransactionalID, r.TransactionalID) {
		return a.refuse(req, txnDenied)
	}
	if !slices.ContainsFunc(r.Topics, func(t kmsg.AddPartitionsToTxnRequestTopic) bool { return !a.topic(auth.OpWrite, t.Topic) }) {
		return next(b, ctx, c, req)
	}
	// As KafkaApis: nothing is added; the partitions of topics it may not
	// write are TOPIC_AUTHORIZATION_FAILED, unknown ones
	// UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	resp.SetVersion(req.Version)
	for _, t := range r.Topics {
		allowed := a.topic(auth.OpWrite, t.Topic)
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, kerr.OperationNotAttempted.Code
			if !allowed {
				rp.ErrorCode = topicDenied
			} else if _, _, ok := a.img.Partition(t.Topic, p); !ok {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return respond(resp)
}

// authorizeAddOffsetsToTxn: WRITE on the transactional id, then READ on
// the group (in that order, as KafkaApis checks them).
func authorizeAddOffsetsToTxn(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.AddOffsetsToTxnRequest)
	if !a.can(auth.OpWrite, auth.ResourceTransactionalID, r.TransactionalID) {
		return a.refuse(req, txnDenied)
	}
	if !a.group(auth.OpRead, r.Group) {
		return a.refuse(req, groupDenied)
	}
	return next(b, ctx, c, req)
}

// authorizeEndTxn: WRITE on the transactional id.
func authorizeEndTxn(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	if !a.can(auth.OpWrite, auth.ResourceTransactionalID, req.Body.(*kmsg.EndTxnRequest).TransactionalID) {
		return a.refuse(req, txnDenied)
	}
	return next(b, ctx, c, req)
}

// groupReadRule is the rule of the group membership APIs: READ on the
// group the request names.
func groupReadRule(group func(kmsg.Request) string) authzRule {
	return func(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
		if !a.group(auth.OpRead, group(req.Body)) {
			return a.refuse(req, groupDenied)
		}
		return next(b, ctx, c, req)
	}
}

func authorizeOffsetCommit(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.OffsetCommitRequest)
	if !a.group(auth.OpRead, r.Group) {
		return a.refuse(req, groupDenied)
	}
	kept, denied := split(r.Topics, func(t kmsg.OffsetCommitRequestTopic) bool { return a.topic(auth.OpRead, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { offsetCommitErrors(&denials, body, topicDenied) })
}

// authorizeOffsetFetch: DESCRIBE on each group; of a group's offsets,
// those of topics it may not DESCRIBE are left out when it asks for all,
// and answered TOPIC_AUTHORIZATION_FAILED when it names them, as KafkaApis
// does.
func authorizeOffsetFetch(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.OffsetFetchRequest)
	describable := func(topic string) bool { return a.topic(auth.OpDescribe, topic) }
	if r.Version < 8 {
		if !a.group(auth.OpDescribe, r.Group) {
			return a.refuse(req, groupDenied)
		}
		var denied []kmsg.OffsetFetchRequestTopic
		if r.Topics != nil {
			r.Topics, denied = split(r.Topics, func(t kmsg.OffsetFetchRequestTopic) bool { return describable(t.Topic) })
		}
		return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
			resp := body.(*kmsg.OffsetFetchResponse)
			resp.Topics = slices.DeleteFunc(resp.Topics, func(t kmsg.OffsetFetchResponseTopic) bool { return !describable(t.Topic) })
			if resp.ErrorCode != 0 {
				return
			}
			for _, t := range denied {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, topicDenied
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		})
	}
	var deniedGroups []string
	deniedTopics := map[string][]kmsg.OffsetFetchRequestGroupTopic{}
	kept := r.Groups[:0:0]
	for _, g := range r.Groups {
		if !a.group(auth.OpDescribe, g.Group) {
			deniedGroups = append(deniedGroups, g.Group)
			continue
		}
		if g.Topics != nil {
			var denied []kmsg.OffsetFetchRequestGroupTopic
			g.Topics, denied = split(g.Topics, func(t kmsg.OffsetFetchRequestGroupTopic) bool { return describable(t.Topic) })
			if denied != nil {
				deniedTopics[g.Group] = denied
			}
		}
		kept = append(kept, g)
	}
	r.Groups = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.OffsetFetchResponse)
		for i := range resp.Groups {
			g := &resp.Groups[i]
			g.Topics = slices.DeleteFunc(g.Topics, func(t kmsg.OffsetFetchResponseGroupTopic) bool { return !describable(t.Topic) })
			if g.ErrorCode != 0 {
				continue
			}
			for _, t := range deniedTopics[g.Group] {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, topicDenied
					rt.Partitions = append(rt.Partitions, rp)
				}
				g.Topics = append(g.Topics, rt)
			}
		}
		for _, name := range deniedGroups {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group, g.ErrorCode = name, groupDenied
			resp.Groups = append(resp.Groups, g)
		}
	})
}

func authorizeOffsetDelete(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.OffsetDeleteRequest)
	if !a.group(auth.OpDelete, r.Group) {
		return a.refuse(req, groupDenied)
	}
	// Topics it may not READ are answered per partition, the others
	// deleted, as KafkaApis does.
	kept, denied := split(r.Topics, func(t kmsg.OffsetDeleteRequestTopic) bool { return a.topic(auth.OpRead, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.OffsetDeleteResponse)
		if resp.ErrorCode != 0 {
			return
		}
		for _, t := range denied {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, topicDenied
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	})
}

func authorizeDescribeGroups(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DescribeGroupsRequest)
	kept, denied := split(r.Groups, func(g string) bool { return a.group(auth.OpDescribe, g) })
	r.Groups = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DescribeGroupsResponse)
		for i := range resp.Groups {
			if g := &resp.Groups[i]; r.IncludeAuthorizedOperations && g.ErrorCode == 0 {
				g.AuthorizedOperations = operationBits(groupOperations, func(op int8) bool { return a.group(op, g.Group) })
			}
		}
		for _, g := range denied {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, groupDenied
			resp.Groups = append(resp.Groups, rg)
		}
	})
}

func authorizeConsumerGroupDescribe(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.ConsumerGroupDescribeRequest)
	kept, denied := split(r.Groups, func(g string) bool { return a.group(auth.OpDescribe, g) })
	r.Groups = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.ConsumerGroupDescribeResponse)
		for i := range resp.Groups {
			if g := &resp.Groups[i]; r.IncludeAuthorizedOperations && g.ErrorCode == 0 {
				g.AuthorizedOperations = operationBits(groupOperations, func(op int8) bool { return a.group(op, g.Group) })
			}
		}
		for _, g := range denied {
			rg := kmsg.NewConsumerGroupDescribeResponseGroup()
			rg.Group, rg.ErrorCode = g, groupDenied
			resp.Groups = append(resp.Groups, rg)
		}
	})
}

func authorizeListGroups(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	if a.cluster(auth.OpDescribe) {
		return next(b, ctx, c, req)
	}
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.ListGroupsResponse)
		kept := resp.Groups[:0]
		for _, g := range resp.Groups {
			if a.group(auth.OpDescribe, g.Group) {
				kept = append(kept, g)
			}
		}
		resp.Groups = kept
	})
}

func authorizeDeleteGroups(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DeleteGroupsRequest)
	kept, denied := split(r.Groups, func(g string) bool { return a.group(auth.OpDelete, g) })
	r.Groups = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DeleteGroupsResponse)
		for _, g := range denied {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, groupDenied
			resp.Groups = append(resp.Groups, rg)
		}
	})
}

// authorizeCreateTopics is Kafka's ControllerApis.createTopics: CREATE on
// the cluster or on the topic lets a topic through (to be created, or
// answered TOPIC_ALREADY_EXISTS: Kafka does not ask for DESCRIBE there);
// without it the topic is TOPIC_AUTHORIZATION_FAILED whether it exists or
// not. A created topic's configuration, partition count and replication
// factor are returned only with DESCRIBE_CONFIGS on it; otherwise
// ConfigErrorCode is TOPIC_AUTHORIZATION_FAILED. A name given twice is
// INVALID_REQUEST before any authorization, as in Kafka (it says nothing
// of the topic).
func authorizeCreateTopics(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.CreateTopicsRequest)
	clusterCreate := a.cluster(auth.OpCreate)
	var denied []string
	hideConfigs := map[string]bool{}
	var named map[string]int // only a request of several topics can repeat one
	if len(r.Topics) > 1 {
		named = make(map[string]int, len(r.Topics))
		for _, t := range r.Topics {
			named[t.Topic]++
		}
	}
	kept := r.Topics[:0:0]
	for _, t := range r.Topics {
		if named[t.Topic] > 1 {
			kept = append(kept, t) // the handler answers INVALID_REQUEST
			continue
		}
		if !clusterCreate && !a.topic(auth.OpCreate, t.Topic) {
			denied = append(denied, t.Topic)
			continue
		}
		kept = append(kept, t)
		if !a.topic(auth.OpDescribeConfigs, t.Topic) {
			hideConfigs[t.Topic] = true
		}
	}
	if len(denied) == 0 && len(hideConfigs) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.CreateTopicsResponse)
		for i := range resp.Topics {
			if t := &resp.Topics[i]; hideConfigs[t.Topic] && t.ErrorCode == 0 {
				t.ConfigErrorCode, t.NumPartitions, t.ReplicationFactor, t.Configs = topicDenied, -1, -1, nil
			}
		}
		for _, name := range denied {
			t := kmsg.NewCreateTopicsResponseTopic()
			t.Topic, t.ErrorCode, t.NumPartitions, t.ReplicationFactor = name, topicDenied, -1, -1
			resp.Topics = append(resp.Topics, t)
		}
	})
}

func authorizeDeleteTopics(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DeleteTopicsRequest)
	keptNames, deniedNames := split(r.TopicNames, func(n string) bool { return a.topic(auth.OpDelete, n) })
	var deniedTopics []kmsg.DeleteTopicsRequestTopic
	kept := r.Topics[:0:0]
	for _, t := range r.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		} else if topic, ok := a.img.TopicsByID[t.TopicID]; ok {
			name = topic.Name
		} else {
			kept = append(kept, t) // unknown id: the handler says so
			continue
		}
		if a.topic(auth.OpDelete, name) {
			kept = append(kept, t)
		} else {
			deniedTopics = append(deniedTopics, t)
		}
	}
	if len(deniedNames) == 0 && len(deniedTopics) == 0 {
		return next(b, ctx, c, req)
	}
	r.TopicNames, r.Topics = keptNames, kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DeleteTopicsResponse)
		for _, n := range deniedNames {
			t := kmsg.NewDeleteTopicsResponseTopic()
			name := n
			t.Topic, t.ErrorCode = &name, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
		for _, dt := range deniedTopics {
			t := kmsg.NewDeleteTopicsResponseTopic()
			t.Topic, t.TopicID, t.ErrorCode = dt.Topic, dt.TopicID, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
	})
}

func authorizeCreatePartitions(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.CreatePartitionsRequest)
	kept, denied := split(r.Topics, func(t kmsg.CreatePartitionsRequestTopic) bool { return a.topic(auth.OpAlter, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.CreatePartitionsResponse)
		for _, d := range denied {
			t := kmsg.NewCreatePartitionsResponseTopic()
			t.Topic, t.ErrorCode = d.Topic, topicDenied
			resp.Topics = append(resp.Topics, t)
		}
	})
}

func authorizeDeleteRecords(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DeleteRecordsRequest)
	kept, denied := split(r.Topics, func(t kmsg.DeleteRecordsRequestTopic) bool { return a.topic(auth.OpDelete, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { deleteRecordsErrors(&denials, body, topicDenied) })
}

func authorizeDescribeProducers(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DescribeProducersRequest)
	kept, denied := split(r.Topics, func(t kmsg.DescribeProducersRequestTopic) bool { return a.topic(auth.OpRead, t.Topic) })
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Topics = kept
	denials := *r
	denials.Topics = denied
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) { describeProducersErrors(&denials, body, topicDenied) })
}

// configAllowed checks a config resource: a topic's own ACLs, a broker's
// the cluster's.
func configAllowed(a access, resourceType kmsg.ConfigResourceType, name string, op int8) (bool, int16) {
	if resourceType == kmsg.ConfigResourceTypeTopic {
		return a.topic(op, name), topicDenied
	}
	return a.cluster(op), clusterDenied
}

func authorizeDescribeConfigs(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.DescribeConfigsRequest)
	type deniedResource struct {
		rt   kmsg.ConfigResourceType
		name string
		code int16
	}
	var denied []deniedResource
	kept := r.Resources[:0:0]
	for _, res := range r.Resources {
		if ok, code := configAllowed(a, res.ResourceType, res.ResourceName, auth.OpDescribeConfigs); ok {
			kept = append(kept, res)
		} else {
			denied = append(denied, deniedResource{res.ResourceType, res.ResourceName, code})
		}
	}
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Resources = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.DescribeConfigsResponse)
		for _, d := range denied {
			res := kmsg.NewDescribeConfigsResponseResource()
			res.ResourceType, res.ResourceName, res.ErrorCode = d.rt, d.name, d.code
			resp.Resources = append(resp.Resources, res)
		}
	})
}

// authorizeAlterConfigs and authorizeIncrementalAlterConfigs answer each
// resource the principal may not alter with its error and alter the
// others, as ControllerApis does.
func authorizeAlterConfigs(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.AlterConfigsRequest)
	kept, denied := split(r.Resources, func(res kmsg.AlterConfigsRequestResource) bool {
		ok, _ := configAllowed(a, res.ResourceType, res.ResourceName, auth.OpAlterConfigs)
		return ok
	})
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Resources = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.AlterConfigsResponse)
		for _, res := range denied {
			_, code := configAllowed(a, res.ResourceType, res.ResourceName, auth.OpAlterConfigs)
			rr := kmsg.NewAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
			resp.Resources = append(resp.Resources, rr)
		}
	})
}

func authorizeIncrementalAlterConfigs(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
	r := req.Body.(*kmsg.IncrementalAlterConfigsRequest)
	kept, denied := split(r.Resources, func(res kmsg.IncrementalAlterConfigsRequestResource) bool {
		ok, _ := configAllowed(a, res.ResourceType, res.ResourceName, auth.OpAlterConfigs)
		return ok
	})
	if len(denied) == 0 {
		return next(b, ctx, c, req)
	}
	r.Resources = kept
	return fixResponse(next(b, ctx, c, req), func(body kmsg.Response) {
		resp := body.(*kmsg.IncrementalAlterConfigsResponse)
		for _, res := range denied {
			_, code := configAllowed(a, res.ResourceType, res.ResourceName, auth.OpAlterConfigs)
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = res.ResourceType, res.ResourceName, code
			resp.Resources = append(resp.Resources, rr)
		}
	})
}

// split returns, in order, the items keep allows and the others: the
// parts of a request that go on to the handler and those answered as
// denied. When keep allows them all, kept is items itself.
func split[T any](items []T, keep func(T) bool) (kept, denied []T) {
	for i, it := range items {
		if keep(it) {
			if denied != nil {
				kept = append(kept, it)
			}
			continue
		}
		if denied == nil {
			kept = append(make([]T, 0, len(items)-1), items[:i]...)
		}
		denied = append(denied, it)
	}
	if denied == nil {
		return items, nil
	}
	return kept, denied
}
